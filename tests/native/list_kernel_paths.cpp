// The engine's kernel paths for CTest (run_on_paths.cmake): the JEPA_GEMM values that run something
// else than the default in the named kinds, one per line, read from the engine's one table
// (jepa_kernel_paths_distinct), so no CMake list repeats it. Under an emulator in a cross build.
//
//     list_kernel_paths [KINDS] [--ggml]     KINDS: f32, bf16, q8 joined by ',' (default: all three)
#include "jepa.h"

#include <cstdio>
#include <cstring>

int main(int argc, char ** argv) {
    const char * kinds = "";
    int with_ggml = 0;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--ggml") == 0) with_ggml = 1;
        else kinds = argv[i];
    }
    const char * paths = jepa_kernel_paths_distinct(kinds, with_ggml);
    if (!paths) {
        std::fprintf(stderr, "list_kernel_paths: %s\n", jepa_error_text());
        return 2;
    }
    std::fprintf(stderr, "kernels: %s; features: %s\n", jepa_cpu_kernels(), jepa_cpu_features());
    for (const char * p = paths; *p;) {
        const char * end = std::strchr(p, ' ');
        const size_t n = end ? size_t(end - p) : std::strlen(p);
        std::printf("%.*s\n", int(n), p);
        p += n;
        while (*p == ' ') ++p;
    }
    return 0;
}
