// Strict, loud tensor lookup during load: every expected tensor present with the right shape and
// dtype, every present tensor expected. Messages name the tensor and both shapes.
#pragma once

#include "model.h"

#include <set>
#include <string>
#include <vector>

namespace jepa {

enum class TensorKind {
    Matrix,     // a 2-D weight that may be f32, f16, bf16 or quantized (the dtype rule)
    Embedding,  // the patch embedding: stays f32
    Other       // norms, biases, positions, tokens, layer scales: f32 only
};

class TensorTable {
public:
    TensorTable(const gguf_context * g, ggml_context * ctx) : g_(g), ctx_(ctx) {}

    // ne is in ggml order (ne[0] first); missing trailing dims are 1.
    ggml_tensor * require(const std::string & name, const std::vector<int64_t> & ne,
                          TensorKind kind = TensorKind::Other);
    ggml_tensor * optional(const std::string & name, const std::vector<int64_t> & ne,
                           TensorKind kind = TensorKind::Other);
    // A [ne0, rows] table whose row count must be one of `rows`.
    ggml_tensor * require_rows(const std::string & name, int64_t ne0, const std::vector<int64_t> & rows);
    // A Linear layer `prefix`.weight [in, out] (ggml order) with an optional `prefix`.bias [out].
    LinearW linear(const std::string & prefix, int64_t in, int64_t out);

    // Size of dimension i (ggml order) of a tensor in the file, or -1 when the file has no such tensor.
    int64_t ne(const std::string & name, int i) const;

    // Every tensor in the file was asked for; throws naming the first that was not.
    void check_all_used() const;
    int64_t n_elements() const;
    int64_t n_bytes() const;

private:
    ggml_tensor * lookup(const std::string & name, const std::vector<int64_t> & ne, TensorKind kind, bool required);
    const gguf_context * g_;
    ggml_context * ctx_;
    std::set<std::string> used_;
};

std::string shape_str(const ggml_tensor * t);

}  // namespace jepa
