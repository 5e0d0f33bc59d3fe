#include "features.h"

#include "build_rows.h"

#include <cstdio>
#include <cstdlib>

namespace jepa::cpu {

namespace {

struct FeatureInfo {
    Feature bit;
    const char * name;
    uint32_t needs;  // what it builds on, beside itself
};

// In bit order. The prerequisites are what the kernels that use a feature also use: the VNNI and
// bf16 kernels are AVX-512 kernels, AMX's row tails run on VNNI and its bf16 stage on AVX512-BF16.
constexpr FeatureInfo kFeatures[kFeatureCount] = {
    {kAvx2, "avx2", 0},
    {kAvxVnni, "avx_vnni", kAvx2},
    {kAvx512, "avx512", kAvx2},
    {kAvx512Vnni, "avx512_vnni", kAvx2 | kAvx512},
    {kAvx512Bf16, "avx512_bf16", kAvx2 | kAvx512},
    {kAmxBf16, "amx_bf16", kAvx2 | kAvx512 | kAvx512Bf16},
    {kAmxInt8, "amx_int8", kAvx2 | kAvx512 | kAvx512Vnni},
    {kAsimd, "asimd", 0},
    {kAsimdDp, "asimddp", kAsimd},
};

constexpr uint32_t kAllX86 = kAvx2 | kAvxVnni | kAvx512 | kAvx512Vnni | kAvx512Bf16 | kAmxBf16 | kAmxInt8;

// The kinds of CPU the project has met or must serve, smallest first.
constexpr CpuClass kClasses[] = {
    {"x86-64", 0, "x86 without AVX2 + FMA (pre-Haswell, Atom-class): ggml's products", true, false},
    {"x86-64-v3", kAvx2, "Haswell to Comet Lake, Zen 1 to Zen 3 (the AVX2-only EPYC)", true, false},
    {"alderlake", kAvx2 | kAvxVnni, "Alder Lake, Raptor Lake, Arrow Lake (AVX2 with AVX-VNNI)", true, false},
    {"x86-64-v4", kAvx2 | kAvx512, "Skylake-X / Skylake-SP (AVX-512 without VNNI or bf16)", true, false},
    {"cascadelake", kAvx2 | kAvx512 | kAvx512Vnni, "Cascade Lake, Ice Lake (AVX-512 with VNNI, no bf16)", true, false},
    {"zen4", kAvx2 | kAvx512 | kAvx512Vnni | kAvx512Bf16, "Zen 4, Zen 5, Cooper Lake (AVX-512 with bf16, no AMX)",
     true, false},
    {"sapphirerapids", kAllX86, "Sapphire Rapids, Emerald and Granite Rapids (AVX-512 with AMX)", true, false},
    {"armv8-a", kAsimd, "ARMv8.0 cores (Cortex-A72, Graviton 1): NEON", false, true},
    {"armv8.2-a+dotprod", kAsimd | kAsimdDp, "Neoverse N1 on, Apple M1 on, Graviton 2 on: NEON with SDOT", false, true},
    {"generic", 0, "no SIMD the kernels use: the portable kernels", false, false},
};

#if defined(__x86_64__) || defined(_M_X64)
bool ours(const CpuClass & c) { return c.x86; }
#elif defined(__aarch64__) || defined(_M_ARM64)
bool ours(const CpuClass & c) { return c.arm64; }
#else
bool ours(const CpuClass & c) { return !c.x86 && !c.arm64; }
#endif

const auto & classes() {
    static const BuildRows r(kClasses, ours);
    return r;
}

constexpr uint32_t kNative = ~0u;

// One token of a mask: "native", a class or a feature; 0 with *known = false when it is none of these.
uint32_t token_set(const std::string & t, bool * known) {
    *known = true;
    if (t == "native") return kNative;
    for (const CpuClass & c : kClasses) {
        if (t == c.name) return c.set;
    }
    for (const FeatureInfo & f : kFeatures) {
        if (t == f.name) return f.bit;
    }
    *known = false;
    return 0;
}

struct Masked {
    std::string text, error;
    uint32_t set = 0;
};

const Masked & masked() {
    static const Masked m = [] {
        Masked r;
        const char * env = std::getenv("JEPA_CPU_FEATURES");
        r.text = env ? env : "";
        const uint32_t mask = r.text.empty() ? kNative : parse_mask(r.text, &r.error);
        if (!r.error.empty()) {
            // Said once, on stderr: the process runs as the smallest CPU rather than as a larger one.
            std::fprintf(stderr, "jepa: JEPA_CPU_FEATURES=%s refused (%s): running with no CPU features\n",
                         r.text.c_str(), r.error.c_str());
        }
        r.set = closed(detected() & mask);
        return r;
    }();
    return m;
}

}  // namespace

const char * feature_name(int index) { return index >= 0 && index < kFeatureCount ? kFeatures[index].name : nullptr; }

uint32_t implied_by(uint32_t feature) {
    for (const FeatureInfo & f : kFeatures) {
        if (f.bit == feature) return f.needs;
    }
    return 0;
}

uint32_t closed(uint32_t set) {
    uint32_t out = 0;
    for (const FeatureInfo & f : kFeatures) {
        if ((set & f.bit) && (set & f.needs) == f.needs) out |= f.bit;
    }
    return out;
}

uint32_t detected() {
    static const uint32_t d = closed(detail::detect_arch());
    return d;
}

uint32_t features() { return masked().set; }
const std::string & mask_text() { return masked().text; }
const std::string & mask_error() { return masked().error; }

int class_count() { return classes().n; }
const CpuClass & class_at(int i) { return classes().at(i); }

uint32_t parse_mask(const std::string & text, std::string * error) {
    uint32_t add = 0, remove = 0;
    bool first = true, starts_with_removal = false;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = text.find(',', at);
        const size_t end = comma == std::string::npos ? text.size() : comma;
        std::string t = text.substr(at, end - at);
        at = end + 1;
        while (!t.empty() && t.front() == ' ') t.erase(t.begin());
        while (!t.empty() && t.back() == ' ') t.pop_back();
        const bool minus = !t.empty() && t.front() == '-';
        if (minus) t.erase(t.begin());
        bool known = false;
        const uint32_t s = token_set(t, &known);
        if (!known) {
            if (error) {
                *error = "unknown CPU feature or class '" + t +
                         "' (features: " + names(kNative) + "; classes: native";
                for (const CpuClass & c : kClasses) *error += std::string(" ") + c.name;
                *error += ")";
            }
            return 0;
        }
        if (first && minus) starts_with_removal = true;
        first = false;
        (minus ? remove : add) |= s;
    }
    if (starts_with_removal) add |= kNative;
    // Removing a feature removes what builds on it (closed() in masked()).
    return add & ~remove;
}

std::string names(uint32_t set) {
    std::string s;
    for (const FeatureInfo & f : kFeatures) {
        if (!(set & f.bit)) continue;
        if (!s.empty()) s += ' ';
        s += f.name;
    }
    return s;
}

}  // namespace jepa::cpu

#if !defined(__x86_64__) && !defined(_M_X64) && !defined(__aarch64__) && !defined(_M_ARM64)
// Any other architecture: no feature the kernels use (the portable kernels run every product).
uint32_t jepa::cpu::detail::detect_arch() { return 0; }
#endif
