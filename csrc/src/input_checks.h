// Checks every entry makes on what a caller hands it before any work: finite floats, and an output
// within the context's max_output_bytes. Both name the argument (or limit) they refuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace jepa {

// The product of non-negative factors, saturating at INT64_MAX (a forged shape must not wrap).
int64_t mul_sat(std::initializer_list<int64_t> factors);

// The index of the first NaN or infinity in x[0..n), or -1 when every value is finite.
int64_t first_non_finite(const float * x, size_t n);

// InvalidInput naming `param` when x[0..n) holds a NaN or an infinity: a non-finite input would
// otherwise come back as all-NaN output with no word. `item` floats make one item (for the message).
void check_finite(const float * x, size_t n, size_t item, const char * param, const char * what);

// JEPA_ERR_RESOURCE naming "max_output_bytes" when n_floats float32 values exceed cap_bytes (0: no cap).
void check_output(int64_t n_floats, int64_t cap_bytes, const char * what);

// The default max_output_bytes: a quarter of this machine's memory, or of the cgroup's limit when lower.
int64_t default_max_output_bytes();

}  // namespace jepa
