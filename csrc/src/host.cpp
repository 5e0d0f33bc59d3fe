#include "host.h"

#include "error.h"

#include "ggml-backend.h"
#ifdef JEPA_USE_CUDA
#include "ggml-cuda.h"
#endif

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace jepa {

namespace {

// The cgroup path of a controller in /proc/self/cgroup's text: v2's "0::/a/b" (controller ""), or the
// v1 line whose comma-separated list names it ("4:cpu,cpuacct:/a/b"). Empty when there is none.
std::string cgroup_path(const std::string & proc_cgroup, const std::string & controller) {
    std::istringstream lines(proc_cgroup);
    for (std::string line; std::getline(lines, line);) {
        const size_t a = line.find(':');
        const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string list = line.substr(a + 1, b - a - 1);
        bool named = controller.empty() && list.empty() && line.compare(0, a, "0") == 0;
        std::istringstream names(list);
        for (std::string c; !controller.empty() && std::getline(names, c, ',');) named = named || c == controller;
        if (named) return line.substr(b + 1);
    }
    return "";
}

std::string read_file(const std::string & path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return in ? s.str() : "";
}

long long read_number(const std::string & path, bool & ok) {
    std::ifstream in(path);
    long long v = 0;
    ok = bool(in >> v);
    return v;
}

// The tightest limit over the directories from dir/path up to dir (each `one(directory)`: 0 for none).
template <class F>
int tightest(const std::string & dir, std::string path, F && one) {
    int best = 0;
    for (;;) {
        while (!path.empty() && path.back() == '/') path.pop_back();
        const int n = one(dir + path);
        if (n > 0) best = best == 0 ? n : std::min(best, n);
        if (path.empty()) return best;
        const size_t slash = path.rfind('/');
        path = slash == std::string::npos ? "" : path.substr(0, slash);
    }
}

}  // namespace

int quota_cpus(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    const long long n = quota / period + (quota % period != 0);
    return int(std::min<long long>(n, 1 << 20));
}

int parse_cpu_max(const std::string & text) {
    std::istringstream in(text);
    std::string quota;
    long long period = 0;
    if (!(in >> quota >> period)) return 0;
    if (quota.find_first_not_of("0123456789") != std::string::npos || quota.size() > 18) return 0;  // "max": none
    return quota_cpus(std::stoll(quota), period);
}

int cgroup_cpu_limit(const std::string & root, const std::string & proc_cgroup) {
    const int v2 = tightest(root, cgroup_path(proc_cgroup, ""), [](const std::string & d) {
        return parse_cpu_max(read_file(d + "/cpu.max"));
    });
    if (v2 > 0) return v2;
    return tightest(root + "/cpu", cgroup_path(proc_cgroup, "cpu"), [](const std::string & d) {
        bool ok_q = false, ok_p = false;
        const long long q = read_number(d + "/cpu.cfs_quota_us", ok_q), p = read_number(d + "/cpu.cfs_period_us", ok_p);
        return ok_q && ok_p ? quota_cpus(q, p) : 0;
    });
}

int affinity_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : int(n);
}

int default_threads() {
    const char * env = std::getenv("JEPA_CGROUP_ROOT");
    const std::string root = env && *env ? env : "/sys/fs/cgroup";
    const int n = affinity_cpus(), limit = cgroup_cpu_limit(root, read_file("/proc/self/cgroup"));
    return std::max(1, limit > 0 ? std::min(n, limit) : n);
}

void device_memory(int device, int index, size_t & free, size_t & total) {
    free = total = 0;
    if (device == JEPA_DEVICE_CPU) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (!dev) fail_arg(JEPA_ERR_BACKEND, "device", "no CPU backend device");
        ggml_backend_dev_memory(dev, &free, &total);
    } else if (device == JEPA_DEVICE_CUDA) {
#ifdef JEPA_USE_CUDA
        const int n = ggml_backend_cuda_get_device_count();
        if (index < 0 || index >= n) fail_arg(JEPA_ERR_INVALID_ARG, "device", "CUDA device %d does not exist (%d found)", index, n);
        ggml_backend_cuda_get_device_memory(index, &free, &total);
#else
        (void) index;
        fail_arg(JEPA_ERR_UNSUPPORTED, "device", "this build has no CUDA backend (rebuild with -DJEPA_CUDA=ON)");
#endif
    } else {
        fail_arg(JEPA_ERR_INVALID_ARG, "device", "unknown device kind %d", int(device));
    }
}

}  // namespace jepa
