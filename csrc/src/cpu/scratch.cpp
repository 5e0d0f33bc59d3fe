// The kernels' scratch memory (gemm_kernels.h): 64-byte aligned, per thread and slot, and counted
// when it is not there, so a context turns the failure into a ResourceLimitError instead of a crash.
#include "gemm_kernels.h"

#include <atomic>
#include <cstdlib>

namespace jepa::gemm {

namespace {

std::atomic<int64_t> g_scratch_failures{0};

// JEPA_SCRATCH_LIMIT_BYTES caps one allocation (tests use it to make one fail).
size_t scratch_limit() {
    static const size_t limit = [] {
        const char * env = std::getenv("JEPA_SCRATCH_LIMIT_BYTES");
        return env && *env ? size_t(std::strtoull(env, nullptr, 10)) : size_t(0);
    }();
    return limit;
}

}  // namespace

namespace detail {

void * scratch_alloc(size_t bytes) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void * p = (scratch_limit() != 0 && rounded > scratch_limit()) ? nullptr : std::aligned_alloc(64, rounded);
    if (!p) g_scratch_failures.fetch_add(1, std::memory_order_relaxed);
    return p;
}

Scratch & thread_scratch(Slot slot) {
    thread_local Scratch slots[int(Slot::Count)];
    return slots[int(slot)];
}

}  // namespace detail

int64_t scratch_failures() { return g_scratch_failures.load(std::memory_order_relaxed); }

}  // namespace jepa::gemm
