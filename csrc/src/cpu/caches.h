// The sizes of the CPU's data caches, which size the work the kernels keep hot: a thread's block of
// rows (half the L2, kernels.inc) and the items one graph runs at once (a quarter of the L3,
// Context::fit_chunk). Blocking never changes a bit (every product element is one FMA chain over k in
// order; an item batched is the item alone), so these steer speed only, and a CPU whose sizes are
// unknown runs with the small defaults below. JEPA_CPU_CACHES stands for another CPU's caches, as
// JEPA_CPU_FEATURES does for its features (docs/cpu.md).
#pragma once

#include <cstdint>
#include <string>

namespace jepa::cpu {

struct Caches {
    int64_t l1d = 0, l2 = 0, l3 = 0;  // bytes: the L1 data cache and the L2 of one core, the L3 it shares
};

// Where a size is not known (no sysconf, no sysfs): a Zen 3 / Skylake client core's.
constexpr Caches kDefaultCaches = {32 << 10, 512 << 10, 16 << 20};

// JEPA_CPU_CACHES's grammar: "l1d=32K,l2=512K,l3=32M" (any subset; K, M, G or plain bytes), each
// size over `base`. Sets *error (and leaves base) on an unknown name or a size out of [4K, 4G].
Caches parse_caches(const std::string & text, const Caches & base, std::string * error);

// This CPU's caches (Linux's sysfs, else glibc's sysconf, else kDefaultCaches per size), unmasked.
Caches detected_caches();
// detected_caches() with JEPA_CPU_CACHES over it, once: what the kernels size their blocks by. A
// refused value is said once on stderr and leaves the detected sizes.
const Caches & caches();

}  // namespace jepa::cpu
