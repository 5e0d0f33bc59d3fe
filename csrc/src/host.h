// What this process may use of the machine: its CPUs (the affinity mask, capped by the cgroup's CPU
// quota) and a device's memory. One rule for "auto threads", read by the engine's default and, through
// jepa_default_threads, by the server and the Ray replicas.
#pragma once

#include "jepa.h"

#include <cstddef>
#include <string>

namespace jepa {

// CPUs a quota of `quota` per `period` allows, rounded up (1.5 CPUs -> 2); 0 when unlimited (a
// quota <= 0 or a period <= 0).
int quota_cpus(long long quota, long long period);

// cgroup v2's cpu.max ("max 100000", "150000 100000"): CPUs, 0 when unlimited or unreadable.
int parse_cpu_max(const std::string & text);

// The tightest CPU quota of a process whose /proc/self/cgroup reads `proc_cgroup`, under the cgroup
// mount `root`: every cpu.max from its own cgroup up to root (v2), else cpu.cfs_quota_us /
// cpu.cfs_period_us the same way under root/cpu (v1). 0 when none limits it. Files that are not there
// do not count (in a container root is its own cgroup and the path below it is not mounted).
int cgroup_cpu_limit(const std::string & root, const std::string & proc_cgroup);

// CPUs in this process's affinity mask (std::thread::hardware_concurrency where it cannot be read).
int affinity_cpus();

// The threads "auto" means: affinity_cpus(), capped by the cgroup's quota, at least 1. Read live (an
// affinity mask can change); the cgroup mount is JEPA_CGROUP_ROOT when set (tests), else /sys/fs/cgroup.
int default_threads();

// (free, total) bytes of a device as its backend reports them now. Throws jepa::Error naming "device".
void device_memory(int device, int index, size_t & free, size_t & total);

}  // namespace jepa
