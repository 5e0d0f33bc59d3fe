#include "error.h"

#include "ggml.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace jepa {

namespace {
thread_local jepa_status t_status = JEPA_OK;
thread_local std::string t_message;
thread_local const char * t_param = "";
thread_local std::string t_ggml_log;

std::string vformat(const char * fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    const int n = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    if (n <= 0) return std::string();
    std::vector<char> buf(size_t(n) + 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, ap);
    return std::string(buf.data(), size_t(n));
}

thread_local bool t_ggml_last_was_error = false;

void ggml_logger(enum ggml_log_level level, const char * text, void *) {
    // Keep the error lines of the current call (and their continuations): they say why ggml refused a file.
    if (level == GGML_LOG_LEVEL_ERROR) {
        // ggml says the specific reason first and a generic "failed to read ..." after it: keep both.
        if (t_ggml_log.size() < 2048) {
            if (!t_ggml_log.empty()) t_ggml_log += "; ";
            t_ggml_log += text;
        }
        t_ggml_last_was_error = true;
    } else if (level == GGML_LOG_LEVEL_CONT && t_ggml_last_was_error) {
        t_ggml_log += text;
    } else {
        t_ggml_last_was_error = false;
    }
    while (!t_ggml_log.empty() && (t_ggml_log.back() == '\n' || t_ggml_log.back() == ' ')) t_ggml_log.pop_back();
    // JEPA_LOG=1 shows everything ggml says, for debugging.
    static const bool verbose = [] { const char * v = std::getenv("JEPA_LOG"); return v && *v && *v != '0'; }();
    if (verbose) std::fputs(text, stderr);
}
}  // namespace

std::string format(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

void fail(jepa_status status, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Error(status, s);
}

void fail_arg(jepa_status status, const char * param, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Error(status, s, param);
}

size_t utf8_valid_prefix(const char * s, size_t n) {
    const auto * u = reinterpret_cast<const unsigned char *>(s);
    size_t i = 0;
    while (i < n) {
        const unsigned c = u[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        // Sequence length and the allowed range of the second byte (RFC 3629, table 3-7 of Unicode).
        size_t len = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) len = 3, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) len = 3;
        else if (c == 0xED) len = 3, hi = 0x9F;  // no surrogates
        else if (c >= 0xEE && c <= 0xEF) len = 3;
        else if (c == 0xF0) len = 4, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) len = 4, hi = 0x8F;  // <= U+10FFFF
        else return i;
        if (n - i < len || u[i + 1] < lo || u[i + 1] > hi) return i;
        for (size_t k = 2; k < len; ++k) {
            if (u[i + k] < 0x80 || u[i + k] > 0xBF) return i;
        }
        i += len;
    }
    return n;
}

void set_error(jepa_status status, const std::string & msg, const char * param) {
    t_status = status;
    t_message.clear();
    for (size_t i = 0; i < msg.size();) {
        const size_t ok = utf8_valid_prefix(msg.data() + i, msg.size() - i);
        t_message.append(msg, i, ok);
        i += ok;
        if (i < msg.size()) t_message += format("\\x%02x", unsigned(static_cast<unsigned char>(msg[i++])));
    }
    t_param = param ? param : "";
}

void clear_error() {
    t_status = JEPA_OK;
    t_message.clear();
    t_param = "";
    t_ggml_log.clear();
}

std::string take_ggml_log() {
    std::string s;
    s.swap(t_ggml_log);
    return s;
}

void install_ggml_logger() {
    static std::once_flag once;
    std::call_once(once, [] { ggml_log_set(ggml_logger, nullptr); });
}

}  // namespace jepa

extern "C" {

const char * jepa_error_text(void) { return jepa::t_message.c_str(); }
jepa_status jepa_error_status(void) { return jepa::t_status; }
const char * jepa_error_param(void) { return jepa::t_param; }
void jepa_error_clear(void) { jepa::clear_error(); }

}
