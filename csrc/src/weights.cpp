#include "weights.h"

#include "error.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <csignal>
#include <string>
#include <sys/stat.h>
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

// -- the SIGBUS guard ----------------------------------------------------------------------------

namespace {

// The live mappings, for the signal handler: lock-free slots (a handler may take no lock).
struct GuardSlot {
    std::atomic<uintptr_t> begin{0};
    std::atomic<uintptr_t> end{0};
    std::atomic<int> poisoned{0};
};
constexpr int kGuardSlots = 1024;
GuardSlot g_slots[kGuardSlots];
struct sigaction g_prev_sigbus;
std::mutex g_guard_mutex;  // installing the handler and claiming slots (never in the handler)

void on_sigbus(int sig, siginfo_t * info, void * uc) {
    const uintptr_t a = uintptr_t(info->si_addr);
    for (GuardSlot & s : g_slots) {
        const uintptr_t b = s.begin.load(std::memory_order_acquire), e = s.end.load(std::memory_order_acquire);
        if (b == 0 || a < b || a >= e) continue;
        // Zero pages over the whole mapping: the faulting read (and any other on this model) completes,
        // the engine refuses what it computed. mmap is a plain system call here.
        void * p = ::mmap(reinterpret_cast<void *>(b), size_t(e - b), PROT_READ,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p != MAP_FAILED) {
            s.poisoned.store(1, std::memory_order_release);
            return;
        }
        break;
    }
    // Not a mapping of ours: what was there before us.
    if ((g_prev_sigbus.sa_flags & SA_SIGINFO) && g_prev_sigbus.sa_sigaction) {
        g_prev_sigbus.sa_sigaction(sig, info, uc);
        return;
    }
    if (g_prev_sigbus.sa_handler != SIG_DFL && g_prev_sigbus.sa_handler != SIG_IGN && g_prev_sigbus.sa_handler) {
        g_prev_sigbus.sa_handler(sig);
        return;
    }
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

// Ours, unless someone installed another handler since (then chain to that one).
void install_sigbus_guard() {
    struct sigaction cur {};
    ::sigaction(SIGBUS, nullptr, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    struct sigaction prev {};
    if (::sigaction(SIGBUS, &sa, &prev) == 0) g_prev_sigbus = prev;
}

int claim_slot(const void * addr, uint64_t size) {
    std::lock_guard<std::mutex> lock(g_guard_mutex);
    install_sigbus_guard();
    for (int i = 0; i < kGuardSlots; ++i) {
        GuardSlot & s = g_slots[i];
        if (s.begin.load(std::memory_order_acquire) != 0) continue;
        s.poisoned.store(0, std::memory_order_relaxed);
        s.end.store(uintptr_t(addr) + uintptr_t(size), std::memory_order_release);
        s.begin.store(uintptr_t(addr), std::memory_order_release);
        return i;
    }
    return -1;  // more live mappings than slots: this one is not guarded (changed() still checks fstat)
}

void release_slot(int i) {
    if (i < 0) return;
    std::lock_guard<std::mutex> lock(g_guard_mutex);
    g_slots[i].begin.store(0, std::memory_order_release);
    g_slots[i].end.store(0, std::memory_order_release);
}

long long ns(const struct timespec & t) { return (long long) t.tv_sec * 1000000000LL + t.tv_nsec; }

}  // namespace

FileMap::FileMap(const char * path, uint64_t size) : size_(size), path_(path) {
    fd_ = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(JEPA_ERR_BAD_FILE, "cannot open %s: %s", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || uint64_t(st.st_size) != size) {
        ::close(fd_);
        fd_ = -1;
        fail(JEPA_ERR_BAD_FILE, "%s changed while it was loading (replace model files by rename, not in place)", path);
    }
    dev_ = (unsigned long long) st.st_dev;
    ino_ = (unsigned long long) st.st_ino;
    mtime_ns_ = ns(st.st_mtim);
    // PROT_READ: the engine never writes a weight it uses in place (a stray write would fault here
    // rather than silently diverge from the file).
    void * p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd_, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
        ::close(fd_);
        fd_ = -1;
        fail(JEPA_ERR_RESOURCE, "cannot map %s (%llu bytes): %s", path, (unsigned long long) size, std::strerror(err));
    }
    addr_ = p;
    slot_ = claim_slot(addr_, size_);
}

FileMap::~FileMap() {
    release_slot(slot_);
    if (addr_) ::munmap(addr_, size_t(size_));
    if (fd_ >= 0) ::close(fd_);
}

std::string FileMap::changed() const {
    if (slot_ >= 0 && g_slots[slot_].poisoned.load(std::memory_order_acquire)) {
        return "a read of its mapping failed (the file was truncated under the running process)";
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return std::string("fstat failed: ") + std::strerror(errno);
    if (uint64_t(st.st_size) != size_) {
        return "its size went from " + std::to_string(size_) + " to " + std::to_string((long long) st.st_size) +
               " bytes since it was loaded";
    }
    // mtime, not ctime: replacing the file by rename (the right way) unlinks this inode, which moves
    // its ctime but leaves these bytes intact.
    if (ns(st.st_mtim) != mtime_ns_) return "it was rewritten in place since it was loaded";
    return "";
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
