// The "auto threads" rule (host.h): cpu.max and cfs quota parsing, the walk from the process's own
// cgroup up to the mount's root (the tightest quota wins), and default_threads honouring a fake
// cgroup mount given by JEPA_CGROUP_ROOT.
#include "host.h"

#include "check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void write(const std::string & path, const std::string & text) {
    FILE * f = std::fopen(path.c_str(), "w");
    CHECK(f != nullptr);
    if (!f) return;
    std::fputs(text.c_str(), f);
    std::fclose(f);
}

std::string temp_dir() {
    const char * dir = std::getenv("TMPDIR");
    std::string root = std::string(dir && *dir ? dir : "/tmp") + "/jepa_test_host_" + std::to_string(getpid());
    mkdir(root.c_str(), 0700);
    return root;
}

void quotas() {
    CHECK(jepa::quota_cpus(100000, 100000) == 1);
    CHECK(jepa::quota_cpus(150000, 100000) == 2);  // rounded up
    CHECK(jepa::quota_cpus(50000, 100000) == 1);   // a fraction is one thread
    CHECK(jepa::quota_cpus(400000, 100000) == 4);
    CHECK(jepa::quota_cpus(-1, 100000) == 0);      // v1's "no quota"
    CHECK(jepa::quota_cpus(100000, 0) == 0);

    CHECK(jepa::parse_cpu_max("max 100000\n") == 0);
    CHECK(jepa::parse_cpu_max("200000 100000\n") == 2);
    CHECK(jepa::parse_cpu_max("250000 100000") == 3);
    CHECK(jepa::parse_cpu_max("") == 0);
    CHECK(jepa::parse_cpu_max("lots") == 0);
    CHECK(jepa::parse_cpu_max("-5 100000") == 0);
    CHECK(jepa::parse_cpu_max("99999999999999999999 1") == 0);
}

void cgroup_walk(const std::string & root) {
    // v2: /a/b under root, with a quota of 3 CPUs at a and 1.5 at root; b itself unlimited.
    mkdir((root + "/a").c_str(), 0700);
    mkdir((root + "/a/b").c_str(), 0700);
    write(root + "/cpu.max", "150000 100000\n");
    write(root + "/a/cpu.max", "300000 100000\n");
    write(root + "/a/b/cpu.max", "max 100000\n");
    CHECK(jepa::cgroup_cpu_limit(root, "0::/a/b\n") == 2);
    write(root + "/cpu.max", "max 100000\n");
    CHECK(jepa::cgroup_cpu_limit(root, "0::/a/b\n") == 3);
    CHECK(jepa::cgroup_cpu_limit(root, "0::/\n") == 0);
    CHECK(jepa::cgroup_cpu_limit(root, "0::/not/mounted\n") == 0);  // a path that is not there
    write(root + "/a/b/cpu.max", "100000 100000\n");
    CHECK(jepa::cgroup_cpu_limit(root, "0::/a/b/\n") == 1);

    // v1: the cpu controller's line ("cpu,cpuacct"), its quota under root/cpu; -1 is no quota.
    const std::string v1 = root + "/v1";
    mkdir(v1.c_str(), 0700);
    mkdir((v1 + "/cpu").c_str(), 0700);
    mkdir((v1 + "/cpu/job").c_str(), 0700);
    write(v1 + "/cpu/cpu.cfs_quota_us", "-1\n");
    write(v1 + "/cpu/cpu.cfs_period_us", "100000\n");
    write(v1 + "/cpu/job/cpu.cfs_quota_us", "250000\n");
    write(v1 + "/cpu/job/cpu.cfs_period_us", "100000\n");
    const std::string proc = "12:cpuset:/other\n4:cpu,cpuacct:/job\n0::/\n";
    CHECK(jepa::cgroup_cpu_limit(v1, proc) == 3);
    CHECK(jepa::cgroup_cpu_limit(v1, "4:cpuacct,cpuset:/job\n") == 0);  // no cpu controller named
}

void default_threads_honours_the_mount(const std::string & root) {
    const std::string fake = root + "/mount";
    mkdir(fake.c_str(), 0700);
    setenv("JEPA_CGROUP_ROOT", fake.c_str(), 1);
    write(fake + "/cpu.max", "max 100000\n");
    CHECK(jepa::default_threads() == jepa::affinity_cpus());
    write(fake + "/cpu.max", "100000 100000\n");
    CHECK(jepa::default_threads() == 1);
    CHECK(jepa_default_threads() == 1);  // the C entry reads the same rule
    write(fake + "/cpu.max", "5000 100000\n");
    CHECK(jepa::default_threads() == 1);  // never 0
    unsetenv("JEPA_CGROUP_ROOT");
    CHECK(jepa::affinity_cpus() >= 1 && jepa::default_threads() >= 1);
}

}  // namespace

int main() {
    quotas();
    const std::string root = temp_dir();
    cgroup_walk(root);
    default_threads_honours_the_mount(root);
    std::system(("rm -rf '" + root + "'").c_str());
    return check_result("test_host");
}
