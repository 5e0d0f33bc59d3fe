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
#include <string>

namespace jepa {

// A read-only private mapping of a whole file; unmapped on destruction.
//
// The file can change under a running process: `cp new.gguf model.gguf` truncates it in place first,
// and a read of a mapped page past the new end is a SIGBUS that would kill the process with every model
// in it. So the mapping keeps its file open and remembers what it mapped, and a process-wide SIGBUS handler covers every live mapping: a fault inside one replaces the
// whole mapping with zero pages (the faulting read completes) and marks it poisoned.
// (What it remembers: device, inode, size and mtime.) The engine checks
// changed() before and after each graph, so a result computed from a changed or poisoned mapping is
// refused, never returned; the model stays refused until it is loaded again. A fault outside every
// mapping goes to the handler that was there before (Python's faulthandler, ASan, the default).
class FileMap {
public:
    FileMap(const char * path, uint64_t size);  // throws jepa::Error (JEPA_ERR_BAD_FILE) on failure
    ~FileMap();
    FileMap(const FileMap &) = delete;
    FileMap & operator=(const FileMap &) = delete;

    const uint8_t * data() const { return static_cast<const uint8_t *>(addr_); }
    uint64_t size() const { return size_; }
    // Why the mapped bytes can no longer be trusted ("" while they can): the file was truncated,
    // rewritten or replaced in place since it was mapped, or a read of the mapping faulted.
    std::string changed() const;

private:
    void * addr_ = nullptr;
    uint64_t size_ = 0;
    int fd_ = -1;
    int slot_ = -1;                    // this mapping's entry in the SIGBUS handler's table
    long long mtime_ns_ = 0;
    unsigned long long dev_ = 0, ino_ = 0;
    std::string path_;
};

// Place and fill every tensor of ctx_w. `own` names the tensors that need memory of their own on the
// CPU (the ones the engine repacks); with a mapping the rest are bound to it in place. Sets
// model.buf_w / buf_map / host_w / map / n_bytes / n_bytes_mapped. Throws jepa::Error.
void place_weights(Model & model, const char * path, const gguf_context * g, uint64_t file_size, bool use_mmap,
                   const std::set<const ggml_tensor *> & own);

}  // namespace jepa
