// x86-64 feature detection: CPUID and the OS's saved state (libgcc / compiler-rt's
// __builtin_cpu_supports checks XCR0 for the YMM and ZMM state), and the kernel's permission for
// AMX's tile data (Linux's arch_prctl). The only file that asks an x86 CPU what it can do.
#include "features.h"

#if defined(__x86_64__) || defined(_M_X64)

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace jepa::cpu::detail {

namespace {

struct Regs {
    unsigned eax, ebx, ecx, edx;
};
Regs cpuid(unsigned leaf, unsigned sub) {
    Regs r{leaf, 0, sub, 0};
    __asm__ volatile("cpuid" : "+a"(r.eax), "=b"(r.ebx), "+c"(r.ecx), "=d"(r.edx));
    return r;
}

// AMX's tile data is off until the process asks (Linux 5.16 on): granted once, for every thread.
bool amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}

}  // namespace

uint32_t detect_arch() {
    __builtin_cpu_init();
    uint32_t f = 0;
    // F16C is CPUID leaf 1 ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c").
    const bool f16c = (cpuid(1, 0).ecx >> 29) & 1;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) f |= kAvx2;
    // AVX-VNNI: leaf 7 sub-leaf 1 EAX bit 4 (clang 14's __builtin_cpu_supports has no "avxvnni").
    if ((cpuid(7, 1).eax >> 4) & 1) f |= kAvxVnni;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
        f |= kAvx512;
    }
    if (__builtin_cpu_supports("avx512vnni")) f |= kAvx512Vnni;
    if (__builtin_cpu_supports("avx512bf16")) f |= kAvx512Bf16;
    // AMX: leaf 7 EDX bits 22 (AMX-BF16), 24 (AMX-TILE), 25 (AMX-INT8), then the kernel's permission
    // (asked only where the CPU has the tiles and the kernels that use them can run).
    const unsigned edx = cpuid(7, 0).edx;
    const bool tile = (edx >> 24) & 1;
    const uint32_t amx = (tile && ((edx >> 22) & 1) ? uint32_t(kAmxBf16) : 0u) | (tile && ((edx >> 25) & 1) ? uint32_t(kAmxInt8) : 0u);
    if (amx && (closed(f | amx) & amx) && amx_permission()) f |= amx;
    return f;
}

}  // namespace jepa::cpu::detail

#endif
