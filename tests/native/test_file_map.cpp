// A mapped model file changed under the running process (weights.h, FileMap): truncated in place (what
// `cp new.gguf model.gguf` does first), rewritten in place at the same size, or replaced by rename.
// A read past the new end of a truncated file is a SIGBUS: the guard turns it into zero pages and a
// poisoned mapping instead of a dead process; changed() names each case; a rename leaves the old
// mapping intact; a SIGBUS outside every mapping still reaches the handler that was there before.
#include "weights.h"

#include "check.h"

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kSize = size_t(1) << 20;

std::string temp_path(const char * name) {
    const char * dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/jepa_test_file_map_" + std::to_string(getpid()) + "_" + name;
}

void write_file(const std::string & path, unsigned char fill) {
    std::vector<unsigned char> bytes(kSize, fill);
    FILE * f = std::fopen(path.c_str(), "wb");
    CHECK(f != nullptr);
    if (!f) return;
    CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
}

// Touch every page: the first read of a page past a truncated end faults.
unsigned sum(const jepa::FileMap & m) {
    unsigned s = 0;
    const volatile uint8_t * p = m.data();
    for (size_t i = 0; i < m.size(); i += 4096) s += p[i];
    return s;
}

void truncated_in_place() {
    const std::string path = temp_path("trunc");
    write_file(path, 7);
    jepa::FileMap m(path.c_str(), kSize);
    CHECK(m.changed().empty());
    CHECK(sum(m) == 7u * unsigned(kSize / 4096));
    CHECK(truncate(path.c_str(), 4096) == 0);
    const std::string why = m.changed();
    CHECK(why.find("size went from 1048576 to 4096") != std::string::npos);
    // The read the engine would make mid-graph: faults, is answered with zeros, poisons the mapping.
    const unsigned after = sum(m);
    CHECK(after <= 7u);  // the first page may still be the file's; the rest are the guard's zeros
    CHECK(m.changed().find("a read of its mapping failed") != std::string::npos);
    unlink(path.c_str());
}

void rewritten_at_the_same_size() {
    const std::string path = temp_path("rewrite");
    write_file(path, 1);
    jepa::FileMap m(path.c_str(), kSize);
    const int fd = open(path.c_str(), O_WRONLY);
    CHECK(fd >= 0);
    const unsigned char two = 2;
    CHECK(pwrite(fd, &two, 1, 12345) == 1);
    // A timestamp of its own: a write within the same clock tick must not look unchanged.
    const struct timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    CHECK(futimens(fd, times) == 0);
    close(fd);
    CHECK(m.changed().find("rewritten in place") != std::string::npos);
    unlink(path.c_str());
}

void replaced_by_rename() {
    const std::string path = temp_path("rename"), next = temp_path("rename.new");
    write_file(path, 3);
    jepa::FileMap m(path.c_str(), kSize);
    write_file(next, 4);
    CHECK(rename(next.c_str(), path.c_str()) == 0);
    CHECK(m.changed().empty());  // the old inode's bytes are intact: the right way to update
    CHECK(sum(m) == 3u * unsigned(kSize / 4096));
    unlink(path.c_str());
}

sigjmp_buf g_jump;
volatile sig_atomic_t g_previous_ran = 0;

void previous_handler(int) {
    g_previous_ran = 1;
    siglongjmp(g_jump, 1);
}

void other_faults_reach_the_previous_handler() {
    struct sigaction sa {};
    sa.sa_handler = previous_handler;
    sigemptyset(&sa.sa_mask);
    struct sigaction old {};
    sigaction(SIGBUS, &sa, &old);
    const std::string path = temp_path("chain");
    write_file(path, 5);
    {
        jepa::FileMap m(path.c_str(), kSize);  // installs the guard over previous_handler
        if (sigsetjmp(g_jump, 1) == 0) raise(SIGBUS);  // no address inside any mapping
        CHECK(g_previous_ran == 1);
        CHECK(m.changed().empty());
    }
    unlink(path.c_str());
    sigaction(SIGBUS, &old, nullptr);
}

}  // namespace

int main() {
    truncated_in_place();
    rewritten_at_the_same_size();
    replaced_by_rename();
    other_faults_reach_the_previous_handler();
    return check_result("test_file_map");
}
