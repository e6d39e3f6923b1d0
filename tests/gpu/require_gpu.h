// GPU tests skip cleanly, with the driver's reason, on a machine without a usable GPU; the
// whole-space tests can be split between processes.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "driver/gpu_driver.h"

#define KGEN_REQUIRE_GPU()                                \
  do {                                                    \
    std::string why;                                      \
    if (!::kgen::gpu_driver().available(&why)) GTEST_SKIP() << why; \
  } while (0)

namespace kgen {

// KGEN_GPU_TEST_SPLIT="i/n" (0 <= i < n): the tests that walk a whole config space run only the
// units (one config, or one default's checks) whose index modulo n is i, so n processes, on one
// GPU or several, share one such test between them. Unset: every unit. A malformed value fails
// the test rather than silently running all or nothing.
class GpuTestSplit {
 public:
  GpuTestSplit() {
    const char* text = std::getenv("KGEN_GPU_TEST_SPLIT");
    if (text == nullptr || *text == '\0') return;
    int part = -1, parts = 0;
    char tail = 0;
    if (std::sscanf(text, "%d/%d%c", &part, &parts, &tail) != 2 || parts < 1 || part < 0 || part >= parts) {
      ADD_FAILURE() << "KGEN_GPU_TEST_SPLIT must be i/n with 0 <= i < n, got '" << text << "'";
      part = 0, parts = 1;
    }
    part_ = part, parts_ = parts;
  }
  // Whether this process runs the next unit.
  bool next() { return index_++ % parts_ == part_; }

 private:
  int part_ = 0, parts_ = 1, index_ = 0;
};

}  // namespace kgen
