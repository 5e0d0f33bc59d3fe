// What this CPU can do, as one set of named features: detected once per process (per architecture,
// features_x86.cpp and features_arm.cpp), then masked by JEPA_CPU_FEATURES so that a test or a
// benchmark can stand for a smaller CPU (docs/cpu.md). Everything that asks what the CPU can do asks
// here: the kernel paths (paths.h), the C API (jepa_cpu_features), and through it the Python tests,
// the tools and their records of the peers.
#pragma once

#include <cstdint>
#include <string>

namespace jepa::cpu {

// One bit per feature the engine's kernels use. Each is what the kernels need of it, the OS's part
// included: avx2 is AVX2 + FMA + F16C with the YMM state enabled (x86-64-v3's vector part), avx512
// is F + BW + DQ + VL (x86-64-v4's), the AMX ones need the kernel to grant the tile state. A feature
// is only ever present with what it builds on (implied_by below): masking avx512 away drops AMX too.
enum Feature : uint32_t {
    kAvx2 = 1u << 0,
    kAvxVnni = 1u << 1,     // VPDPBUSD on ymm (Alder Lake, Sapphire Rapids)
    kAvx512 = 1u << 2,
    kAvx512Vnni = 1u << 3,  // VPDPBUSD on zmm (Cascade Lake on)
    kAvx512Bf16 = 1u << 4,  // VDPBF16PS (Cooper Lake, Zen 4 on)
    kAmxBf16 = 1u << 5,     // AMX-TILE + AMX-BF16 (Sapphire Rapids on)
    kAmxInt8 = 1u << 6,     // AMX-TILE + AMX-INT8
    kAsimd = 1u << 7,       // ARM64 Advanced SIMD (NEON)
    kAsimdDp = 1u << 8,     // ARMv8.2 DotProd (SDOT)
};
constexpr int kFeatureCount = 9;

// A feature's name as JEPA_CPU_FEATURES and jepa_cpu_features spell it (Linux's /proc/cpuinfo
// spelling where it has one: avx_vnni, avx512_bf16, amx_int8, asimddp), or NULL past the last.
const char * feature_name(int index);

// The features a feature needs beside itself: a set that lacks them drops it.
uint32_t implied_by(uint32_t feature);
// The set with every feature whose prerequisites are missing dropped.
uint32_t closed(uint32_t set);

// The features this CPU has (once; x86: CPUID and the OS's XCR0, AMX's permission asked of the
// kernel; ARM64: HWCAP), unmasked.
uint32_t detected();
// detected() masked by JEPA_CPU_FEATURES, once: what the engine runs as.
uint32_t features();
// JEPA_CPU_FEATURES as given ("" when unset), and the reason it was refused ("" when it was not). A
// refused mask leaves no feature (the smallest CPU: never more than the CPU has), so a typo shows.
const std::string & mask_text();
const std::string & mask_error();

// A CPU class: a name JEPA_CPU_FEATURES takes for the feature set of a kind of CPU met in the field.
struct CpuClass {
    const char * name;
    uint32_t set;
    const char * example;  // the CPUs it stands for
    bool x86, arm64;       // the architectures it is a class of (neither: any other)
};
// This build's architecture's classes, smallest first (JEPA_CPU_FEATURES takes every class's name).
int class_count();
const CpuClass & class_at(int i);

// JEPA_CPU_FEATURES's value as a mask: "native" (everything), a class, feature names, or a list of
// these joined by ',' (their union); a token "-name" removes a feature or a class's features (a list
// that opens with one starts from "native"). Sets *error and returns 0 on an unknown name.
uint32_t parse_mask(const std::string & text, std::string * error);

// The names of the features in set, space-separated, in feature order.
std::string names(uint32_t set);

namespace detail {
// The architecture's own detection (features_x86.cpp / features_arm.cpp; 0 elsewhere).
uint32_t detect_arch();
}  // namespace detail

}  // namespace jepa::cpu
