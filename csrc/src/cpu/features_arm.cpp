// ARM64 feature detection: the kernel's HWCAP on Linux; elsewhere (macOS, Windows) what every ARM64
// core has and what the compiler was told. The only file that asks an ARM CPU what it can do.
#include "features.h"

#if defined(__aarch64__) || defined(_M_ARM64)

#if defined(__linux__)
#include <sys/auxv.h>
#endif

namespace jepa::cpu::detail {

uint32_t detect_arch() {
#if defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP);
    uint32_t f = 0;
    if (hw & (1ul << 1)) f |= kAsimd;     // HWCAP_ASIMD (asm/hwcap.h)
    if (hw & (1ul << 20)) f |= kAsimdDp;  // HWCAP_ASIMDDP
    return f;
#elif defined(__ARM_FEATURE_DOTPROD)
    return kAsimd | kAsimdDp;  // (Apple silicon has DotProd from M1 on)
#else
    return kAsimd;
#endif
}

}  // namespace jepa::cpu::detail

#endif
