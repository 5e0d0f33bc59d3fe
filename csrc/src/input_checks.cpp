#include "input_checks.h"

#include "error.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace jepa {

int64_t mul_sat(std::initializer_list<int64_t> factors) {
    int64_t p = 1;
    for (int64_t f : factors) {
        if (f <= 0) return 0;
        if (__builtin_mul_overflow(p, f, &p)) return INT64_MAX;
    }
    return p;
}

int64_t first_non_finite(const float * x, size_t n) {
    // A branch-free OR over a block vectorises (an exponent of all ones is NaN or infinity); only a
    // block that holds one is searched again.
    constexpr size_t kBlock = 4096;
    for (size_t b = 0; b < n; b += kBlock) {
        const size_t e = std::min(n, b + kBlock);
        uint32_t bad = 0;
        for (size_t i = b; i < e; ++i) {
            uint32_t u;
            std::memcpy(&u, x + i, sizeof(u));
            bad |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad) {
            for (size_t i = b; i < e; ++i) {
                if (!std::isfinite(x[i])) return int64_t(i);
            }
        }
    }
    return -1;
}

void check_finite(const float * x, size_t n, size_t item, const char * param, const char * what) {
    const int64_t i = first_non_finite(x, n);
    if (i < 0) return;
    const float v = x[i];
    fail_arg(JEPA_ERR_INVALID_ARG, param, "%s: %s hold a non-finite value (%s) at index %lld (item %lld)", what, param,
             std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long) i, (long long) (item ? size_t(i) / item : 0));
}

void check_output(int64_t n_floats, int64_t cap_bytes, const char * what) {
    if (cap_bytes <= 0) return;
    const int64_t bytes = mul_sat({n_floats, int64_t(sizeof(float))});
    if (bytes > cap_bytes) {
        fail_arg(JEPA_ERR_RESOURCE, "max_output_bytes",
                 "%s: the output would take %lld bytes, over the context's max_output_bytes of %lld", what,
                 (long long) bytes, (long long) cap_bytes);
    }
}

namespace {
int64_t memory_quarter() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t mem = pages > 0 && page > 0 ? mul_sat({pages, page}) : int64_t(16) << 30;
    // A container's memory limit (cgroup v2, then v1) is what this process may really use.
    for (const char * f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        std::ifstream in(f);
        std::string v;
        if (in >> v && !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 19) {
            const int64_t lim = std::stoll(v);
            if (lim > 0) mem = std::min(mem, lim);
        }
    }
    return std::max<int64_t>(mem / 4, int64_t(64) << 20);
}
}  // namespace

int64_t default_max_output_bytes() {
    static const int64_t v = memory_quarter();  // read once: the defaults are asked for often
    return v;
}

}  // namespace jepa
