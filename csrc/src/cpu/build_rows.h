// The rows of a constant table that this build serves (the CPU classes of features.cpp, the kernel
// paths of paths.cpp: each table holds every architecture's rows), in table order, with an at() that
// clamps its index to the rows there are.
#pragma once

#include <cstddef>

namespace jepa::cpu {

template <class Row, size_t N>
struct BuildRows {
    const Row * rows[N];
    int n = 0;

    BuildRows(const Row (&table)[N], bool (*ours)(const Row &)) {
        for (const Row & r : table) {
            if (ours(r)) rows[n++] = &r;
        }
    }
    const Row & at(int i) const { return *rows[i < 0 ? 0 : i >= n ? n - 1 : i]; }
};

}  // namespace jepa::cpu
