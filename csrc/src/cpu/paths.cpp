#include "paths.h"

#include "build_rows.h"
#include "features.h"

#include <cstdlib>
#include <cstring>

namespace jepa::cpu {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
constexpr Arch kBuildArch = Arch::X86;
#elif defined(__aarch64__) || defined(_M_ARM64)
constexpr Arch kBuildArch = Arch::Arm64;
#else
constexpr Arch kBuildArch = Arch::Any;  // (only the shared rows, and a native row of its own)
#endif

// The table, each architecture's rows from the top down; every JEPA_GEMM value is one row's name.
// A row caps each kind; the CPU's features decide within the caps (select()).
constexpr PathRow kRows[] = {
    {"native", Arch::X86, F32::Avx512, Bf16::Avx512Bf16, Q8::Avx512Vnni, true, "the best this CPU has"},
    {"avx512bf16", Arch::X86, F32::Avx512, Bf16::Avx512Bf16, Q8::Avx512Vnni, false,
     "AVX512-BF16 and VNNI without AMX (Zen 4)"},
    {"avx512", Arch::X86, F32::Avx512, Bf16::Widen, Q8::Avx512Vnni, false,
     "AVX-512 FMA, bf16 weights widened, VNNI's int8 dots (Cascade Lake; Skylake-X: AVX2's)"},
    {"avxvnni", Arch::X86, F32::Avx2, Bf16::Widen, Q8::AvxVnni, false, "AVX2 with AVX-VNNI's int8 dots (Alder Lake)"},
    {"avx2", Arch::X86, F32::Avx2, Bf16::Widen, Q8::Avx2, false, "x86-64-v3 as the AVX2-only EPYC has it: no VNNI"},
    {"native", Arch::Arm64, F32::Neon, Bf16::Widen, Q8::NeonDot, false, "the best this CPU has"},
    {"neon", Arch::Arm64, F32::Neon, Bf16::Widen, Q8::NeonDot, false, "NEON, with SDOT where HWCAP has DotProd"},
#if !defined(__x86_64__) && !defined(_M_X64) && !defined(__aarch64__) && !defined(_M_ARM64)
    {"native", Arch::Any, F32::Portable, Bf16::Widen, Q8::Portable, false, "the portable kernels"},
#endif
    {"portable", Arch::Any, F32::Portable, Bf16::Widen, Q8::Portable, false, "any CPU: portable C++, the same bits"},
    {"ggml", Arch::Any, F32::Ggml, Bf16::Widen, Q8::Portable, false,
     "ggml's own products (not batch bit-identical; not a path of the promise)"},
};

bool ours(const PathRow & r) { return r.arch == Arch::Any || r.arch == kBuildArch; }

const auto & rows() {
    static const BuildRows r(kRows, ours);
    return r;
}

// The best f32 kernel a feature set runs. x86 without AVX2 + FMA (pre-2013 cores, Atom-class):
// std::fma would be a software routine, so ggml's products run there, without the batch bit-identity
// (JEPA_GEMM=portable gives it).
F32 best_f32(uint32_t f) {
    if (kBuildArch == Arch::X86) return (f & kAvx512) ? F32::Avx512 : (f & kAvx2) ? F32::Avx2 : F32::Ggml;
    if (kBuildArch == Arch::Arm64) return (f & kAsimd) ? F32::Neon : F32::Portable;
    return F32::Portable;
}

// The f32 kernels' order within an architecture (NEON beside AVX2, above portable).
int rank(F32 k) {
    switch (k) {
        case F32::Ggml: return 0;
        case F32::Portable: return 1;
        case F32::Avx2:
        case F32::Neon: return 2;
        case F32::Avx512: return 3;
    }
    return 0;
}

}  // namespace

int row_count() { return rows().n; }
const PathRow & row_at(int i) { return rows().at(i); }

int selected_row() {
    static const int row = [] {
        const char * env = std::getenv("JEPA_GEMM");
        for (int i = 0; env && *env && i < row_count(); ++i) {
            if (std::strcmp(env, row_at(i).name) == 0) return i;
        }
        return 0;
    }();
    return row;
}

Selection select(const PathRow & row, uint32_t f) {
    Selection s;
    const F32 best = best_f32(f);
    // Ggml and portable are chosen, never detected; any other cap holds the best down to it.
    if (row.f32 == F32::Ggml || row.f32 == F32::Portable) s.f32 = row.f32;
    else s.f32 = rank(best) <= rank(row.f32) ? best : row.f32;
    if (row.bf16 == Bf16::Avx512Bf16 && s.f32 == F32::Avx512 && (f & kAvx512Bf16)) {
        s.bf16 = Bf16::Avx512Bf16;
        s.amx_bf16 = row.amx && (f & kAmxBf16);
    }
    const bool x86_own = s.f32 == F32::Avx2 || s.f32 == F32::Avx512;
    if (s.f32 == F32::Avx512 && (f & kAvx512Vnni) && row.q8 == Q8::Avx512Vnni) {
        s.q8 = Q8::Avx512Vnni;
        s.amx_int8 = row.amx && (f & kAmxInt8);
    } else if (x86_own && (f & kAvxVnni) && (row.q8 == Q8::Avx512Vnni || row.q8 == Q8::AvxVnni)) {
        s.q8 = Q8::AvxVnni;
    } else if (x86_own) {
        s.q8 = Q8::Avx2;
    } else if (s.f32 == F32::Neon && (f & kAsimdDp) && row.q8 == Q8::NeonDot) {
        s.q8 = Q8::NeonDot;
    }
    return s;
}

const Selection & selection() {
    static const Selection s = select(row_at(selected_row()), features());
    return s;
}

bool can_run(F32 k) {
    if (k == F32::Ggml || k == F32::Portable) return true;
    const F32 best = best_f32(features());
    if ((k == F32::Neon) != (best == F32::Neon)) return false;  // another architecture's kernel
    return best != F32::Ggml && best != F32::Portable && rank(best) >= rank(k);
}

const char * name_of(F32 k) {
    switch (k) {
        case F32::Ggml: return "ggml";
        case F32::Portable: return "portable";
        case F32::Avx2: return "avx2";
        case F32::Avx512: return "avx512";
        case F32::Neon: return "neon";
    }
    return "?";
}

const char * cap_name(F32 k) { return name_of(k); }
const char * cap_name(Bf16 k) { return k == Bf16::Avx512Bf16 ? "avx512-bf16" : "widen"; }
const char * cap_name(Q8 k) {
    switch (k) {
        case Q8::Avx512Vnni: return "avx512-vnni";
        case Q8::AvxVnni: return "avx-vnni";
        case Q8::Avx2: return "avx2";
        case Q8::NeonDot: return "neon-dotprod";
        case Q8::Portable: return "portable";
    }
    return "portable";
}

std::string f32_kernel(const Selection & s) {
    if (s.f32 == F32::Ggml) return "ggml";
    const bool plain = s.f32 == F32::Portable || s.f32 == F32::Neon;  // (every NEON FMA is fused)
    return plain ? name_of(s.f32) : std::string(name_of(s.f32)) + "-fma";
}

std::string bf16_kernel(const Selection & s) {
    return s.amx_bf16 ? "amx" : s.bf16 == Bf16::Avx512Bf16 ? "avx512-bf16" : f32_kernel(s);
}

std::string q8_kernel(const Selection & s) {
    if (s.f32 == F32::Ggml) return "ggml";
    return s.amx_int8 ? "amx-int8" : cap_name(s.q8);
}

std::string describe(const Selection & s) {
    if (s.f32 == F32::Ggml) return "ggml";
    return "f32/f16: " + f32_kernel(s) + "; bf16: " + bf16_kernel(s) + "; q8_0: " + q8_kernel(s);
}

const char * describe() {
    static const std::string s = describe(selection());
    return s.c_str();
}

std::vector<int> distinct_rows(const Kinds & kinds, bool with_ggml) {
    auto key = [&](int i) {
        const Selection s = select(row_at(i), features());
        return (kinds.f32 ? f32_kernel(s) : "") + "|" + (kinds.bf16 ? bf16_kernel(s) : "") + "|" +
               (kinds.q8 ? q8_kernel(s) : "");
    };
    // From the bottom up, so the most capped of equal rows stands for them (it asks the least of the
    // CPU: avx2 rather than avxvnni for the f32 kernels); listed in table order.
    std::vector<std::string> seen{key(selected_row())};
    std::vector<int> out;
    for (int i = row_count() - 1; i >= 0; --i) {
        if (!with_ggml && row_at(i).f32 == F32::Ggml) continue;
        const std::string k = key(i);
        bool repeat = false;
        for (const std::string & s : seen) repeat = repeat || s == k;
        if (repeat) continue;
        seen.push_back(k);
        out.insert(out.begin(), i);
    }
    return out;
}

}  // namespace jepa::cpu
