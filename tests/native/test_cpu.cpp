// The CPU's one home (csrc/src/cpu/features.*, paths.*): the JEPA_CPU_FEATURES grammar, the closure
// of features over what they build on, and the kernels every row of the path table selects on every
// CPU class, written out here by hand, so a change to the selection shows as a changed line. select()
// is a pure function of a row and a feature set, so every class is checked on any CPU of the
// architecture: no hardware is needed to know what a Zen 4 or a Sapphire Rapids would run.
#include "check.h"
#include "cpu/caches.h"
#include "cpu/features.h"
#include "cpu/paths.h"
#include "jepa.h"

#include <cstring>
#include <string>

namespace cpu = jepa::cpu;

namespace {

uint32_t mask(const char * text, std::string * error = nullptr) {
    std::string e;
    const uint32_t m = cpu::parse_mask(text, &e);
    if (error) *error = e;
    else check(e.empty(), std::string("mask '") + text + "' refused: " + e);
    return m;
}

int row_named(const char * name) {
    for (int i = 0; i < cpu::row_count(); ++i) {
        if (std::strcmp(cpu::row_at(i).name, name) == 0) return i;
    }
    check(false, std::string("no row ") + name);
    return 0;
}

// What a row runs on a class: the kernel line.
void expect(const char * klass, const char * row, const char * line) {
    const std::string got = cpu::describe(cpu::select(cpu::row_at(row_named(row)), cpu::closed(mask(klass))));
    check(got == line, std::string(klass) + " / JEPA_GEMM=" + row + ": got '" + got + "', expected '" + line + "'");
}

void check_grammar() {
    check(mask("x86-64-v3") == cpu::kAvx2, "x86-64-v3 is avx2");
    check(mask("x86-64") == 0 && mask("generic") == 0, "the classes without SIMD are empty");
    check(mask("avx2,avx_vnni") == mask("alderlake"), "a list of features is their union");
    check(mask("x86-64-v4, avx512_vnni") == mask("cascadelake"), "spaces around a token are allowed");
    check(mask("native") == ~0u, "native is everything");
    check(mask("-amx_int8") == (~0u & ~uint32_t(cpu::kAmxInt8)), "a list opening with a removal starts from native");
    check(mask("zen4,-avx512_bf16") == mask("cascadelake"), "a removal after a class");
    check(mask("sapphirerapids,-zen4") == (mask("sapphirerapids") & ~mask("zen4")), "a class removed");
    std::string error;
    check(mask("zen5", &error) == 0 && error.find("zen5") != std::string::npos, "an unknown class is refused by name");
    check(mask("avx2,", &error) == 0 && !error.empty(), "an empty token is refused");
    check(mask("", &error) == 0 && !error.empty(), "an empty mask given explicitly is refused");
    check(cpu::names(mask("zen4")) == "avx2 avx512 avx512_vnni avx512_bf16", "names in feature order");
}

void check_closure() {
    // Features never stand without what they build on: masking AVX-512 away drops everything on it.
    check(cpu::closed(cpu::kAmxInt8 | cpu::kAvx2) == cpu::kAvx2, "amx_int8 without avx512 is dropped");
    check(cpu::closed(mask("sapphirerapids,-avx512")) == (cpu::kAvx2 | cpu::kAvxVnni), "AVX-512's dependents go with it");
    check(cpu::closed(mask("-avx2")) == (cpu::kAsimd | cpu::kAsimdDp), "every x86 feature needs avx2");
    check(cpu::closed(cpu::kAsimdDp) == 0, "asimddp needs asimd");
    check(cpu::closed(mask("sapphirerapids")) == mask("sapphirerapids"), "a real class is closed already");
    check((cpu::features() & ~cpu::detected()) == 0, "a mask never adds a feature");
    check(cpu::closed(cpu::detected()) == cpu::detected(), "detection is closed");
}

void check_classes() {
    check(cpu::class_count() > 0, "this architecture has classes");
    for (int i = 0; i < cpu::class_count(); ++i) {
        const cpu::CpuClass & c = cpu::class_at(i);
        check(cpu::closed(c.set) == c.set, std::string(c.name) + " is closed");
        for (int j = i + 1; j < cpu::class_count(); ++j) {
            const uint32_t later = cpu::class_at(j).set;
            check((c.set & later) != later || c.set == later, std::string(c.name) + " is listed before a smaller class");
        }
        jepa_cpu_class out;
        check(jepa_cpu_class_get(i, &out) == JEPA_OK && std::strcmp(out.name, c.name) == 0, "jepa_cpu_class_get");
    }
    jepa_cpu_class out;
    check(jepa_cpu_class_get(cpu::class_count(), &out) == JEPA_ERR_INVALID_ARG, "a class past the last is refused");
    check(jepa_cpu_class_get(0, nullptr) == JEPA_ERR_INVALID_ARG, "a NULL out is refused");
}

void check_table() {
    check(std::strcmp(cpu::row_at(0).name, "native") == 0, "the default row opens the table");
    for (const char * name : {"portable", "ggml"}) row_named(name);
    jepa_kernel_path k;
    check(jepa_kernel_path_get(-1, &k) == JEPA_ERR_INVALID_ARG, "a row before the first is refused");
    check(jepa_kernel_path_get(jepa_kernel_path_count(), &k) == JEPA_ERR_INVALID_ARG, "a row past the last is refused");
    int selected = 0;
    for (int i = 0; i < jepa_kernel_path_count(); ++i) {
        check(jepa_kernel_path_get(i, &k) == JEPA_OK, "jepa_kernel_path_get");
        selected += k.selected;
        const std::string line = k.kernels;
        check(line == "ggml" || line == std::string("f32/f16: ") + k.f32 + "; bf16: " + k.bf16 + "; q8_0: " + k.q8,
              std::string(k.name) + ": the line is its kinds");
        if (k.selected) check(line == jepa_cpu_kernels(), "the selected row is what the process runs");
    }
    check(selected == 1, "one row is selected");
    check(jepa_kernel_paths_distinct("f32,bogus", 0) == nullptr, "an unknown kind is refused");
    check(std::string(jepa_error_param()) == "kinds", "... naming the parameter");
    const std::string all = jepa_kernel_paths_distinct("", 1);
    check(all.find("ggml") != std::string::npos, "ggml's row is among the distinct with with_ggml");
    check(std::string(jepa_kernel_paths_distinct("", 0)).find("ggml") == std::string::npos, "... and only then");
    check(std::string(jepa_kernel_paths_distinct("f32", 0)).find("portable") != std::string::npos ||
              cpu::selection().f32 == cpu::F32::Portable,
          "portable is another f32 path wherever the default is not portable");
}

// Every row on every class, by hand. A row never raises a kernel past the class; ggml's row is "ggml".
void check_selection() {
#if defined(__x86_64__) || defined(_M_X64)
    const char * avx2 = "f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx2";
    const char * portable = "f32/f16: portable; bf16: portable; q8_0: portable";
    for (const char * c : {"x86-64-v3", "alderlake", "x86-64-v4", "cascadelake", "zen4", "sapphirerapids"}) {
        expect(c, "avx2", avx2);
        expect(c, "portable", portable);
        expect(c, "ggml", "ggml");
    }
    // x86 without AVX2 + FMA: ggml's products by default, the portable kernels when asked.
    for (const char * row : {"native", "avx512bf16", "avx512", "avxvnni", "avx2", "ggml"}) expect("x86-64", row, "ggml");
    expect("x86-64", "portable", portable);
    // The AVX2-only EPYC (Zen 3): every row above AVX2 falls to it.
    for (const char * row : {"native", "avx512bf16", "avx512", "avxvnni"}) expect("x86-64-v3", row, avx2);
    // Alder Lake: AVX-VNNI's int8 dots beside AVX2's f32.
    const char * adl = "f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx-vnni";
    for (const char * row : {"native", "avx512bf16", "avx512", "avxvnni"}) expect("alderlake", row, adl);
    // Skylake-X: AVX-512's f32, AVX2's int8 dots (no VNNI), bf16 widened.
    const char * skx = "f32/f16: avx512-fma; bf16: avx512-fma; q8_0: avx2";
    for (const char * row : {"native", "avx512bf16", "avx512"}) expect("x86-64-v4", row, skx);
    expect("x86-64-v4", "avxvnni", avx2);
    // Cascade Lake: VNNI's int8 dots.
    const char * clx = "f32/f16: avx512-fma; bf16: avx512-fma; q8_0: avx512-vnni";
    for (const char * row : {"native", "avx512bf16", "avx512"}) expect("cascadelake", row, clx);
    expect("cascadelake", "avxvnni", avx2);
    // Zen 4: the bf16 kernel on VDPBF16PS.
    const char * zen4 = "f32/f16: avx512-fma; bf16: avx512-bf16; q8_0: avx512-vnni";
    for (const char * row : {"native", "avx512bf16"}) expect("zen4", row, zen4);
    expect("zen4", "avx512", clx);
    // Sapphire Rapids: AMX tiles for bf16 and int8 by default only.
    expect("sapphirerapids", "native", "f32/f16: avx512-fma; bf16: amx; q8_0: amx-int8");
    expect("sapphirerapids", "avx512bf16", zen4);
    expect("sapphirerapids", "avx512", clx);
    expect("sapphirerapids", "avxvnni", adl);
#elif defined(__aarch64__) || defined(_M_ARM64)
    const char * neon = "f32/f16: neon; bf16: neon; q8_0: portable";
    const char * sdot = "f32/f16: neon; bf16: neon; q8_0: neon-dotprod";
    for (const char * row : {"native", "neon"}) {
        expect("armv8-a", row, neon);
        expect("armv8.2-a+dotprod", row, sdot);
    }
    expect("armv8-a", "portable", "f32/f16: portable; bf16: portable; q8_0: portable");
    expect("armv8.2-a+dotprod", "ggml", "ggml");
#endif
}

}  // namespace

// JEPA_CPU_CACHES's grammar: sizes over a base, and a refusal that names what it refused and keeps the base.
void check_caches() {
    const cpu::Caches base = {48 << 10, 1 << 20, 32 << 20};
    std::string e;
    cpu::Caches c = cpu::parse_caches("l2=512K,l3=16M", base, &e);
    check(e.empty() && c.l1d == base.l1d && c.l2 == (512 << 10) && c.l3 == (16 << 20), "l2=512K,l3=16M: " + e);
    c = cpu::parse_caches("l1d=32768", base, &e);
    check(e.empty() && c.l1d == 32768 && c.l2 == base.l2, "plain bytes");
    c = cpu::parse_caches("", base, &e);
    check(e.empty() && c.l3 == base.l3, "empty: the base");
    for (const char * bad : {"l4=1M", "l2=1X", "l2=", "l2=1K", "l3=8G", "l2=99999999999999999999", "l2"}) {
        std::string err;
        c = cpu::parse_caches(bad, base, &err);
        check(!err.empty() && c.l2 == base.l2 && c.l3 == base.l3, std::string("'") + bad + "' not refused");
    }
    const cpu::Caches d = cpu::detected_caches();
    check(d.l1d > 0 && d.l2 > 0 && d.l3 > 0, "every detected size is known or the default");
    std::printf("caches: l1d %lld, l2 %lld, l3 %lld bytes\n", (long long) d.l1d, (long long) d.l2, (long long) d.l3);
}

int main() {
    std::printf("kernels: %s; features: %s (detected: %s)\n", jepa_cpu_kernels(), jepa_cpu_features(),
                jepa_cpu_features_detected());
    check_grammar();
    check_closure();
    check_classes();
    check_table();
    check_selection();
    check_caches();
    return check_result("test_cpu");
}
