// Where a model's weight bytes live. On the CPU the file is memory-mapped (as llama.cpp does): every
// tensor the engine uses as stored (norms, biases, tables, quantized matrices, and every matrix on a
// CPU whose kernels are ggml's) of 64 KiB or more is used in place from the mapping, so a load costs
// page-table entries and processes serving one file share one copy in the page cache. The matrices
// the engine's own kernel repacks (gemm::pack_in_place) need a copy of their own: they are read into
// 64-byte aligned memory, never through the mapping; small tensors are copied too (weights.cpp says
// why). Without a mapping (CUDA, use_mmap = 0, or nothing left to use
// in place) every tensor is read into memory of the backend's.
#pragma once

#include "gguf.h"
#include "model.h"

#include <cstdint>
#include <set>

namespace jepa {

// A read-only private mapping of a whole file; unmapped on destruction.
class FileMap {
public:
    FileMap(const char * path, uint64_t size);  // throws jepa::Error (JEPA_ERR_BAD_FILE) on failure
    ~FileMap();
    FileMap(const FileMap &) = delete;
    FileMap & operator=(const FileMap &) = delete;

    const uint8_t * data() const { return static_cast<const uint8_t *>(addr_); }
    uint64_t size() const { return size_; }

private:
    void * addr_ = nullptr;
    uint64_t size_ = 0;
};

// Place and fill every tensor of ctx_w. `own` names the tensors that need memory of their own on the
// CPU (the ones the engine repacks); with a mapping the rest are bound to it in place. Sets
// model.buf_w / buf_map / host_w / map / n_bytes / n_bytes_mapped. Throws jepa::Error.
void place_weights(Model & model, const char * path, const gguf_context * g, uint64_t file_size, bool use_mmap,
                   const std::set<const ggml_tensor *> & own);

}  // namespace jepa
