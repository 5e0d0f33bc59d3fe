#include "weights.h"

#include "error.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace jepa {

namespace {

struct FileCloser {
    void operator()(FILE * f) const { std::fclose(f); }
};

uint64_t tensor_offset(const gguf_context * g, const ggml_tensor * t) {
    return gguf_get_data_offset(g) + gguf_get_tensor_offset(g, gguf_find_tensor(g, ggml_get_name(t)));
}

template <typename F> void each_tensor(ggml_context * ctx, F && f) {
    for (ggml_tensor * t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) f(t);
}

// The tensors of `ctx` that `pick` selects, in 64-byte aligned memory of our own (the kernels'
// panels are cache-line aligned; ggml's CPU buffer type only promises 32). nullptr when none.
template <typename Pick>
ggml_backend_buffer_t alloc_host(ggml_context * ctx, Pick && pick, void ** host) {
    constexpr size_t kAlign = 64;
    auto up = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    size_t total = 0;
    each_tensor(ctx, [&](ggml_tensor * t) { if (pick(t)) total += up(ggml_nbytes(t)); });
    if (total == 0) return nullptr;
    *host = std::aligned_alloc(kAlign, total);
    if (!*host) fail(JEPA_ERR_RESOURCE, "cannot allocate %zu bytes for the weights", total);
    ggml_backend_buffer_t buf = ggml_backend_cpu_buffer_from_ptr(*host, total);
    if (!buf) fail(JEPA_ERR_RESOURCE, "cannot allocate a CPU buffer for the weights");
    size_t off = 0;
    bool ok = true;
    each_tensor(ctx, [&](ggml_tensor * t) {
        if (!ok || !pick(t)) return;
        ok = ggml_backend_tensor_alloc(buf, t, static_cast<char *>(*host) + off) == GGML_STATUS_SUCCESS;
        off += up(ggml_nbytes(t));
    });
    if (!ok) {
        ggml_backend_buffer_free(buf);
        fail(JEPA_ERR_RESOURCE, "cannot place the weights in their buffer");
    }
    return buf;
}

// Read the selected tensors' bytes from the file (any backend: staged through host memory).
template <typename Pick> void read_tensors(const char * path, const gguf_context * g, ggml_context * ctx, Pick && pick) {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(path, "rb"));
    if (!f) fail(JEPA_ERR_BAD_FILE, "cannot open %s", path);
    std::vector<uint8_t> staging;
    each_tensor(ctx, [&](ggml_tensor * t) {
        if (!pick(t)) return;
        const uint64_t off = tensor_offset(g, t), size = ggml_nbytes(t);
        void * dst = t->data;
        if (!ggml_backend_buffer_is_host(t->buffer)) {
            staging.resize(size);
            dst = staging.data();
        }
        if (fseeko(f.get(), off_t(off), SEEK_SET) != 0 || std::fread(dst, 1, size, f.get()) != size) {
            fail(JEPA_ERR_BAD_FILE, "%s: cannot read tensor data (the file changed while loading?)", ggml_get_name(t));
        }
        if (dst != t->data) ggml_backend_tensor_set(t, staging.data(), 0, size);
    });
}

}  // namespace

FileMap::FileMap(const char * path, uint64_t size) : size_(size) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(JEPA_ERR_BAD_FILE, "cannot open %s: %s", path, std::strerror(errno));
    // PROT_READ: the engine never writes a weight it uses in place (a stray write would fault here
    // rather than silently diverge from the file).
    void * p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) fail(JEPA_ERR_RESOURCE, "cannot map %s (%llu bytes): %s", path, (unsigned long long) size, std::strerror(err));
    addr_ = p;
}

FileMap::~FileMap() {
    if (addr_) ::munmap(addr_, size_t(size_));
}

void place_weights(Model & model, const char * path, const gguf_context * g, uint64_t file_size, bool use_mmap,
                   const std::set<const ggml_tensor *> & own) {
    ggml_context * ctx = model.ctx_w;
    if (model.device != JEPA_DEVICE_CPU) {
        model.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(ctx, model.buffer_type());
        if (!model.buf_w) fail(JEPA_ERR_RESOURCE, "cannot allocate the weights on the device");
        ggml_backend_buffer_set_usage(model.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        model.n_bytes = int64_t(ggml_backend_buffer_get_size(model.buf_w));
        read_tensors(path, g, ctx, [](const ggml_tensor *) { return true; });
        return;
    }
    // GGUF aligns tensor data to general.alignment (32 by default, a power of two): ggml's CPU ops
    // take that; only the repacked matrices need 64, and they get memory of their own anyway.
    // Small tensors (norms, biases) are copied too: the page cache may hold the file in large folios
    // (up to 2 MiB, from readahead), and a fault on one 4 KiB bias maps its whole folio, most of it
    // the bytes of repacked matrices this process already copied.
    constexpr size_t kInPlaceMin = size_t(64) << 10;
    auto in_place = [&](const ggml_tensor * t) {
        return use_mmap && !own.count(t) && ggml_nbytes(t) >= kInPlaceMin;
    };
    auto copied = [&](const ggml_tensor * t) { return !in_place(t); };
    model.buf_w = alloc_host(ctx, copied, &model.host_w);
    if (model.buf_w) {
        ggml_backend_buffer_set_usage(model.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        model.n_bytes = int64_t(ggml_backend_buffer_get_size(model.buf_w));
    }
    bool any_in_place = false;
    each_tensor(ctx, [&](ggml_tensor * t) { any_in_place = any_in_place || in_place(t); });
    if (!any_in_place) {  // nothing to share (every matrix repacked): no mapping to keep
        read_tensors(path, g, ctx, copied);
        return;
    }
    model.map = std::make_unique<FileMap>(path, file_size);
    const FileMap & map = *model.map;
    // One buffer over the whole mapping; the in-place tensors point into it where the file has them.
    model.buf_map = ggml_backend_cpu_buffer_from_ptr(const_cast<uint8_t *>(map.data()), size_t(map.size()));
    if (!model.buf_map) fail(JEPA_ERR_RESOURCE, "cannot wrap the mapping of %s in a CPU buffer", path);
    ggml_backend_buffer_set_usage(model.buf_map, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    each_tensor(ctx, [&](ggml_tensor * t) {
        if (!in_place(t)) return;
        void * addr = const_cast<uint8_t *>(map.data()) + tensor_offset(g, t);
        if (ggml_backend_tensor_alloc(model.buf_map, t, addr) != GGML_STATUS_SUCCESS) {
            fail(JEPA_ERR_BAD_FILE, "%s: cannot use the tensor in place from the mapping", ggml_get_name(t));
        }
        model.n_bytes_mapped += int64_t(ggml_nbytes(t));
    });
    model.n_bytes += model.n_bytes_mapped;
    // The copies are read, not copied out of the mapping: sequential reads of a cold file beat
    // page faults (measured: a ViT-L f16 load 0.6 s read against 1.6 s faulted in from the map),
    // and the mapping's pages under them are never touched.
    read_tensors(path, g, ctx, copied);
}

}  // namespace jepa
