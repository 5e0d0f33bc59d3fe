#include "caches.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace jepa::cpu {

namespace {

constexpr int64_t kMin = 4 << 10, kMax = int64_t(4) << 30;

// "32K", "1M", "524288": bytes, or -1.
int64_t parse_size(const std::string & s) {
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return -1;
    size_t used = 0;
    unsigned long long v = 0;
    try {
        v = std::stoull(s, &used);
    } catch (...) {  // out of range: no exception leaves this file
        return -1;
    }
    if (v > (1ull << 40)) return -1;
    int64_t n = int64_t(v);
    const std::string unit = s.substr(used);
    if (unit == "K" || unit == "k") n <<= 10;
    else if (unit == "M" || unit == "m") n <<= 20;
    else if (unit == "G" || unit == "g") n <<= 30;
    else if (!unit.empty()) return -1;
    return n;
}

// Linux's sysfs for cpu0: the first cache of `level` that holds data ("Data" or "Unified"), or 0.
int64_t sysfs_cache(int level) {
    for (int i = 0; i < 8; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
        int l = 0;
        std::string type, size;
        if (!(lv >> l) || !(ty >> type) || !(sz >> size)) continue;
        if (l != level || type == "Instruction") continue;
        const int64_t n = parse_size(size);
        return n > 0 ? n : 0;
    }
    return 0;
}

// sysfs first: it is the kernel's view (a VM's own topology), where glibc's sysconf reads CPUID and
// gave 384 MB of L3 on a 2-core EPYC guest whose sysfs (and lscpu) say 32 MB.
int64_t known(long sysconf_value, int level, int64_t fallback) {
    const int64_t s = sysfs_cache(level);
    if (s > 0) return s;
    return sysconf_value > 0 ? int64_t(sysconf_value) : fallback;
}

}  // namespace

Caches parse_caches(const std::string & text, const Caches & base, std::string * error) {
    Caches c = base;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t end = std::min(text.find(',', start), text.size());
        const std::string tok = text.substr(start, end - start);
        start = end + 1;
        if (tok.empty()) continue;
        const size_t eq = tok.find('=');
        const std::string name = tok.substr(0, eq);
        const int64_t n = eq == std::string::npos ? -1 : parse_size(tok.substr(eq + 1));
        int64_t * slot = name == "l1d" ? &c.l1d : name == "l2" ? &c.l2 : name == "l3" ? &c.l3 : nullptr;
        if (!slot) {
            *error = "unknown cache '" + name + "' (l1d, l2 or l3)";
            return base;
        }
        if (n < kMin || n > kMax) {
            *error = "'" + tok + "' is not a size in [4K, 4G]";
            return base;
        }
        *slot = n;
    }
    return c;
}

Caches detected_caches() {
    Caches c;
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    const long s1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), s2 = sysconf(_SC_LEVEL2_CACHE_SIZE), s3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#else
    const long s1 = 0, s2 = 0, s3 = 0;
#endif
    c.l1d = known(s1, 1, kDefaultCaches.l1d);
    c.l2 = known(s2, 2, kDefaultCaches.l2);
    c.l3 = known(s3, 3, kDefaultCaches.l3);
    return c;
}

const Caches & caches() {
    static const Caches c = [] {
        const Caches d = detected_caches();
        const char * env = std::getenv("JEPA_CPU_CACHES");
        if (!env || !*env) return d;
        std::string error;
        const Caches m = parse_caches(env, d, &error);
        if (!error.empty()) std::fprintf(stderr, "jepa: JEPA_CPU_CACHES=%s refused (%s): the detected sizes run\n", env, error.c_str());
        return m;
    }();
    return c;
}

}  // namespace jepa::cpu
