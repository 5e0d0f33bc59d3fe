// The kernel paths: one declared table (paths.cpp), a row per JEPA_GEMM value, each the most every
// kernel kind may be (f32 / f16, bf16, q8_0, AMX tiles). The path a process runs is its row applied to
// the CPU's features (features.h): each kind gets the best kernel the features allow within the row's
// caps, so a row never raises a kernel past the CPU. The table is the one list of paths: the C API
// exports it (jepa_kernel_path_get), and tools/kernel_paths.py, CTest and the Python tests read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jepa::cpu {

// The f32 / f16 kernels: ggml's own products (the ggml row only: fast, not batch bit-identical),
// portable C++, AVX2 + FMA + F16C, AVX-512; on ARM64 Advanced SIMD (NEON; above portable, beside
// the x86 ones rather than above them: a build has the one or the others).
enum class F32 : int { Ggml = 0, Portable = 1, Avx2 = 2, Avx512 = 3, Neon = 4 };
// bf16 weights: widened to the f32 kernel, or the bf16 kernel on VDPBF16PS (AMX tiles on top where
// the row allows AMX).
enum class Bf16 : int { Widen = 0, Avx512Bf16 = 1 };
// q8_0 weights: the engine's int8 product's block dots (the same bits on each), in rising order on
// x86; NEON's SDOT beside them.
enum class Q8 : int { Portable = 0, Avx2 = 1, AvxVnni = 2, Avx512Vnni = 3, NeonDot = 4 };

enum class Arch : int { Any = 0, X86 = 1, Arm64 = 2 };

// One row: a JEPA_GEMM value and its caps.
struct PathRow {
    const char * name;
    Arch arch;     // the rows of another architecture are not this build's
    F32 f32;       // the most the f32 / f16 kernel may be
    Bf16 bf16;     // the most the bf16 kernel may be
    Q8 q8;         // the most the q8_0 product may be
    bool amx;      // AMX tiles where the CPU has them (bf16: AMX-BF16; q8_0: AMX-INT8)
    const char * stands_for;  // the CPU the row stands for, for the docs and tools
};

// What a process runs: the kernels chosen for each kind.
struct Selection {
    F32 f32 = F32::Ggml;
    Bf16 bf16 = Bf16::Widen;
    bool amx_bf16 = false;   // the bf16 kernel on AMX tiles
    Q8 q8 = Q8::Portable;
    bool amx_int8 = false;   // the q8_0 product's block dots on AMX-INT8 tiles (VNNI runs the row tails)
    bool own() const { return f32 != F32::Ggml; }
};

// This build's rows (its architecture's and the shared ones), the default ("native") first.
int row_count();
const PathRow & row_at(int i);
// The row JEPA_GEMM names (unset, empty or a name not among this build's rows: the default).
int selected_row();

// A row applied to a feature set: a pure function, so a tool can ask what any row would run.
Selection select(const PathRow & row, uint32_t features);
// The selection of this process: selected_row() on features(), once.
const Selection & selection();

// Whether this CPU (masked) and build can run the f32 kernel, whatever JEPA_GEMM says.
bool can_run(F32 k);
// The f32 kernel's name as JEPA_GEMM spells it: "avx2", "avx512", "neon", "portable", "ggml".
const char * name_of(F32 k);
// A cap's name in the exported table: the f32 kernel's, "avx512-bf16" / "widen", the q8_0 product's.
const char * cap_name(F32 k);
const char * cap_name(Bf16 k);
const char * cap_name(Q8 k);
// The kernel line of a selection: "f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx2", or "ggml".
std::string describe(const Selection & s);
// Kind by kind, as the line names them ("ggml" for each on ggml's path).
std::string f32_kernel(const Selection & s);
std::string bf16_kernel(const Selection & s);
std::string q8_kernel(const Selection & s);
// This process's line, once (what jepa_cpu_kernels returns).
const char * describe();

// Which kinds a comparison of paths looks at.
struct Kinds {
    bool f32 = true, bf16 = true, q8 = true;
};
// The rows that run something else in those kinds than the selected row and than each other, in table
// order (the most capped of equal rows stands for them): what a suite runs again after its plain run. ggml's
// row among them only with with_ggml (it is not a path of the promise; some suites check it steps aside).
std::vector<int> distinct_rows(const Kinds & kinds, bool with_ggml);

}  // namespace jepa::cpu
