// GPU tests skip cleanly, with the driver's reason, on a machine without a usable GPU.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "driver/gpu_driver.h"

#define KGEN_REQUIRE_GPU()                                \
  do {                                                    \
    std::string why;                                      \
    if (!::kgen::gpu_driver().available(&why)) GTEST_SKIP() << why; \
  } while (0)
