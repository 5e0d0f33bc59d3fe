// The native suites' one assertion: CHECK counts a failure and goes on, so a run lists every broken
// check; a suite's main returns check_result() (0 when none failed).
#pragma once

#include <cstdio>
#include <string>

inline int g_failures = 0;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            ++g_failures;                                                                  \
        }                                                                                  \
    } while (0)

// The same with a message of the caller's (what was compared, on which shape), printed on failure.
inline void check(bool ok, const std::string & what) {
    if (!ok) {
        ++g_failures;
        std::printf("FAIL %s\n", what.c_str());
    }
}

inline int check_result(const char * suite) {
    if (g_failures) {
        std::fprintf(stderr, "%s: %d check(s) failed\n", suite, g_failures);
        return 1;
    }
    std::printf("%s: all checks passed\n", suite);
    return 0;
}
