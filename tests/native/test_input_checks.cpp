// The checks every entry makes on its inputs (input_checks.h, error.h): UTF-8 validation against a
// table of known sequences, the non-finite scan (and what it costs), saturating sizes and the
// output cap.
#include "error.h"
#include "input_checks.h"

#include "check.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

bool valid(const std::string & s) { return jepa::utf8_valid_prefix(s.data(), s.size()) == s.size(); }

void utf8_table() {
    for (const char * ok : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x9c\x93", "\xf0\x9f\x98\x80", "\xef\xbf\xbf",
                            "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf", "\xee\x80\x80"}) {
        CHECK(valid(ok));
    }
    for (const char * bad : {"\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",
                             "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe",
                             "\xe2\x82", "\xf0\x9f\x98", "\xc3", "\xc3(", "\xe2\x28\xa1"}) {
        CHECK(!valid(bad));
    }
    CHECK(jepa::utf8_valid_prefix("ab\xffz", 4) == 2);
    CHECK(jepa::utf8_valid_prefix("caf\xc3\xa9\xc3", 6) == 5);
    // An embedded NUL is a valid byte (a C string simply ends there).
    CHECK(jepa::utf8_valid_prefix("a\0b", 3) == 3);
}

void error_text_is_utf8() {
    jepa::set_error(JEPA_ERR_BAD_FILE, "cannot open caf\xe9.gguf");
    CHECK(std::string(jepa_error_text()) == "cannot open caf\\xe9.gguf");
    jepa::set_error(JEPA_ERR_BAD_FILE, "caf\xc3\xa9 ok");
    CHECK(std::string(jepa_error_text()) == "caf\xc3\xa9 ok");
    jepa_error_clear();
}

void non_finite_scan() {
    std::vector<float> x(10000, 1.5f);
    CHECK(jepa::first_non_finite(x.data(), x.size()) == -1);
    CHECK(jepa::first_non_finite(nullptr, 0) == -1);
    for (size_t at : {size_t(0), size_t(4095), size_t(4096), size_t(9999)}) {
        for (float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
            std::vector<float> y = x;
            y[at] = v;
            y[9999 - (at % 100)] = v;  // the first one is reported
            CHECK(jepa::first_non_finite(y.data(), y.size()) == int64_t(std::min(at, 9999 - at % 100)));
        }
    }
    // The extremes of the finite range pass.
    std::vector<float> edge = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min(), -0.0f};
    CHECK(jepa::first_non_finite(edge.data(), edge.size()) == -1);
    bool threw = false;
    try {
        std::vector<float> y(12, 0.0f);
        y[7] = std::nanf("");
        jepa::check_finite(y.data(), y.size(), 4, "pixels", "encode");
    } catch (const jepa::Error & e) {
        threw = e.status() == JEPA_ERR_INVALID_ARG && std::strcmp(e.param(), "pixels") == 0 &&
                std::string(e.what()).find("index 7 (item 1)") != std::string::npos;
    }
    CHECK(threw);
}

// What the scan costs: one 224 x 224 RGB image (150528 floats), the input of a ViT-B/16 encode
// (tens of ms on a CPU). Printed for docs/fuzzing.md; the bound only catches a scan gone scalar-slow.
void scan_cost() {
    std::vector<float> img(3 * 224 * 224, 0.25f);
    const int reps = 2000;
    int64_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        img[size_t(r) % img.size()] = float(r);
        sink += jepa::first_non_finite(img.data(), img.size());
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("non-finite scan: %.1f us per 224x224x3 image (%.2f ns per float)%s\n", us, 1000.0 * us / double(img.size()),
                sink == -reps ? "" : "?");
    CHECK(us < 2000.0);
}

void sizes_and_cap() {
    CHECK(jepa::mul_sat({2, 3, 7}) == 42);
    CHECK(jepa::mul_sat({int64_t(1) << 40, int64_t(1) << 30}) == INT64_MAX);
    CHECK(jepa::mul_sat({5, 0}) == 0);
    CHECK(jepa::default_max_output_bytes() >= (int64_t(64) << 20));
    jepa::check_output(1000, 4000, "encode");  // exactly at the cap: fine
    jepa::check_output(int64_t(1) << 62, 0, "encode");  // 0: no cap
    bool threw = false;
    try {
        jepa::check_output(1001, 4000, "encode");
    } catch (const jepa::Error & e) {
        threw = e.status() == JEPA_ERR_RESOURCE && std::strcmp(e.param(), "max_output_bytes") == 0 &&
                std::string(e.what()).find("4004 bytes") != std::string::npos;
    }
    CHECK(threw);
}

}  // namespace

int main() {
    utf8_table();
    error_text_is_utf8();
    non_finite_scan();
    scan_cost();
    sizes_and_cap();
    return check_result("test_input_checks");
}
