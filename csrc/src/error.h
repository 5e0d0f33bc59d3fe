// Errors inside the engine: thrown as jepa::Error, caught at the C API boundary and turned into
// a status plus the calling thread's message. Nothing here ever reaches a caller as an exception.
#pragma once

#include "jepa.h"

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace jepa {

class Error : public std::runtime_error {
public:
    Error(jepa_status status, const std::string & msg, const char * param = "")
        : std::runtime_error(msg), status_(status), param_(param ? param : "") {}
    jepa_status status() const { return status_; }
    // The refused argument's name ("" when the failure is not one argument's): jepa_error_param.
    const char * param() const { return param_; }

private:
    jepa_status status_;
    const char * param_;  // a string literal
};

// printf-style message formatting.
std::string format(const char * fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(jepa_status status, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
// fail() naming the argument it refuses (a string literal: "pixels", "actions", ...).
[[noreturn]] void fail_arg(jepa_status status, const char * param, const char * fmt, ...)
    __attribute__((format(printf, 3, 4)));

// The first byte at which s[0..n) stops being valid UTF-8 (overlongs, surrogates and code points
// past U+10FFFF count as invalid), or n when it is all valid.
size_t utf8_valid_prefix(const char * s, size_t n);

// The calling thread's error slot (what jepa_error_text returns).
// The message is stored as valid UTF-8 (a byte that is not becomes \xNN): messages quote file
// contents and paths, and every caller above reads them as text.
void set_error(jepa_status status, const std::string & msg, const char * param = "");
void clear_error();

// The last error line ggml logged on this thread (ggml reports GGUF parse failures this way).
std::string take_ggml_log();
// Route ggml's log into the thread-local slot above instead of stderr (once per process).
void install_ggml_logger();

}  // namespace jepa

// Run `body` (returning jepa_status) with every exception turned into a status and message.
#define JEPA_GUARD(body)                                                        \
    try {                                                                       \
        jepa::clear_error();                                                    \
        body                                                                    \
    } catch (const jepa::Error & e) {                                           \
        jepa::set_error(e.status(), e.what(), e.param());                       \
        return e.status();                                                      \
    } catch (const std::bad_alloc &) {                                          \
        jepa::set_error(JEPA_ERR_RESOURCE, "out of memory");                    \
        return JEPA_ERR_RESOURCE;                                               \
    } catch (const std::exception & e) {                                        \
        jepa::set_error(JEPA_ERR_BACKEND, std::string("internal error: ") + e.what()); \
        return JEPA_ERR_BACKEND;                                                \
    }
