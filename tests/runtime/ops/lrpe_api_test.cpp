// Argument validation of lrpe_cosine / md_lrpe_cosine in the C++ and C APIs: no GPU needed,
// every error names its argument first.
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>

#include "kgen/c_api.h"
#include "kgen/kgen.hpp"
#include "driver/gpu_driver.h"
#include "fake_pointer.h"

namespace kgen {
namespace {

using test_pointers::fake;

// A valid call: x (2, 4, 30, 48) bf16, theta (4, 48) fp32; md: 2-d grid 4×5 after l = 10, e = 24.
struct Call {
  TensorView x, theta, o, d_o, dx, angles;
  LrpeOptions options;
  MdLrpeOptions md;
  bool use_md = false, backward = false, with_angles = false;
  Call() {
    std::int64_t xs[4] = {2, 4, 30, 48}, os[4] = {2, 4, 30, 96}, ts[2] = {4, 48}, as[3] = {4, 30, 48};
    x = make_contiguous_view(fake(0x10000000), DType::bf16, 4, xs, 0);
    o = make_contiguous_view(fake(0x20000000), DType::bf16, 4, os, 0);
    d_o = make_contiguous_view(fake(0x30000000), DType::bf16, 4, os, 0);
    dx = make_contiguous_view(fake(0x40000000), DType::bf16, 4, xs, 0);
    theta = make_contiguous_view(fake(0x50000000), DType::f32, 2, ts, 0);
    angles = make_contiguous_view(fake(0x60000000), DType::f32, 3, as, 0);
    md.dims = 2, md.grid[0] = 4, md.grid[1] = 5, md.extra = 10;
  }
  void run() {
    const TensorView* a = with_angles ? &angles : nullptr;
    if (use_md) {
      if (backward) md_lrpe_cosine_backward(x, theta, d_o, dx, a, md, nullptr);
      else md_lrpe_cosine_forward(x, theta, o, a, md, nullptr);
    } else {
      if (backward) lrpe_cosine_backward(x, theta, d_o, dx, options, nullptr);
      else lrpe_cosine_forward(x, theta, o, options, nullptr);
    }
  }
};

void expect_invalid(const std::function<void(Call&)>& mutate, const std::string& name) {
  Call c;
  mutate(c);
  try {
    c.run();
    FAIL() << "expected invalid_argument naming " << name;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << "message should start with '" << name << "': " << e.what();
  }
}

TEST(LrpeApi, RejectsBadArgumentsNamingThem) {
  expect_invalid([](Call& c) { c.x.data = nullptr; }, "x:");
  expect_invalid([](Call& c) { c.x.ndim = 2; }, "x:");
  expect_invalid([](Call& c) { c.x.strides[3] = 2; }, "x:");
  expect_invalid([](Call& c) { c.x.shape[3] = 300, c.o.shape[3] = 600; }, "x:");
  expect_invalid([](Call& c) { c.o.shape[3] = 48; }, "o:");
  expect_invalid([](Call& c) { c.o.dtype = DType::f16; }, "o:");
  expect_invalid([](Call& c) { c.o.device = 1; }, "o:");
  expect_invalid([](Call& c) { c.backward = true, c.d_o.shape[2] = 29; }, "d_o:");
  expect_invalid([](Call& c) { c.backward = true, c.dx.shape[3] = 96; }, "dx:");
  expect_invalid([](Call& c) { c.theta.dtype = DType::bf16; }, "theta:");
  expect_invalid([](Call& c) { c.theta.shape[0] = 3; }, "theta:");
  expect_invalid([](Call& c) { c.theta.shape[1] = 47; }, "theta:");
  expect_invalid([](Call& c) { c.theta.ndim = 1; }, "theta:");
  expect_invalid([](Call& c) { c.options.offset = 1 << 24; }, "offset:");
  expect_invalid([](Call& c) { c.options.config = "sp:t256"; }, "config:");
  expect_invalid([](Call& c) { c.options.config = "sp:t256:r4:v3"; }, "config:");
  expect_invalid([](Call& c) { c.options.act = LrpeAct::softmax_seq, c.options.config = "sp:t256:r4:v8"; }, "config:");
  // md
  expect_invalid([](Call& c) { c.use_md = true, c.md.dims = 4; }, "dims:");
  expect_invalid([](Call& c) { c.use_md = true, c.md.grid[1] = 6; }, "grid:");
  expect_invalid([](Call& c) { c.use_md = true, c.md.extra = -1; }, "extra:");
  expect_invalid([](Call& c) { c.use_md = true, c.theta.shape[1] = 23; }, "theta:");  // 23·2 < 48
  expect_invalid([](Call& c) { c.use_md = true, c.with_angles = true, c.angles.shape[1] = 29; }, "angles:");
  expect_invalid([](Call& c) { c.use_md = true, c.with_angles = true, c.angles.dtype = DType::bf16; }, "angles:");
  expect_invalid([](Call& c) { c.use_md = true, c.md.config = "sp:t256:r4:v8:cache"; }, "config:");
  expect_invalid([](Call& c) { c.use_md = true, c.with_angles = true, c.md.config = "sp:t256:r4:v8"; }, "config:");
}

// Sizes and offsets at the ends of their types: refused by name, never overflowed into range.
TEST(LrpeApi, ExtremeShapesAndOffsetsAreRefused) {
  expect_invalid([](Call& c) { c.options.offset = INT64_MIN; }, "offset:");
  expect_invalid([](Call& c) { c.options.offset = INT64_MAX; }, "offset:");
  expect_invalid([](Call& c) { c.options.offset = -(1 << 24); }, "offset:");
  expect_invalid([](Call& c) { c.x.shape[2] = -30; }, "x: dimension 2 is -30");
  expect_invalid([](Call& c) { c.x.shape[0] = 1LL << 62, c.x.shape[1] = 1LL << 62; }, "x: shape");
  expect_invalid([](Call& c) { c.x.strides[0] = INT64_MAX; }, "x: strides reach past");
}

TEST(LrpeApi, ValidCallsWithoutAGpuFailWithNoDevice) {
  if (gpu_driver().available()) GTEST_SKIP() << "a GPU is present";
  for (bool md : {false, true})
    for (bool backward : {false, true}) {
      Call c;
      c.use_md = md, c.backward = backward, c.with_angles = md;
      try {
        c.run();
        FAIL() << "expected no_device";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::no_device) << e.what();
      }
    }
}

TEST(LrpeCApi, NamesTheArgumentAndTheAct) {
  std::int64_t xs[4] = {1, 2, 16, 32}, os[4] = {1, 2, 16, 64}, ts[2] = {2, 32};
  auto dl = [](void* data, DLDataTypeCode code, int bits, int ndim, std::int64_t* shape, DLDeviceType dev) {
    DLTensor t{};
    t.data = data, t.device = {dev, 0}, t.ndim = ndim;
    t.dtype = {static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
    t.shape = shape;
    return t;
  };
  DLTensor x = dl(fake(0x1000), kDLBfloat, 16, 4, xs, kDLCUDA), o = dl(fake(0x2000), kDLBfloat, 16, 4, os, kDLCUDA);
  DLTensor theta = dl(fake(0x3000), kDLFloat, 32, 2, ts, kDLCUDA);
  DLTensor host_x = dl(fake(0x1000), kDLBfloat, 16, 4, xs, kDLCPU);
  EXPECT_EQ(kgen_lrpe_cosine_forward(&host_x, &theta, &o, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("x:", 0), 0u) << kgen_last_error();
  kgen_lrpe_options opt{};
  opt.act = 9;
  EXPECT_EQ(kgen_lrpe_cosine_forward(&x, &theta, &o, &opt, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("act:", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_md_lrpe_cosine_forward(&x, &theta, &o, nullptr, nullptr, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("options:", 0), 0u) << kgen_last_error();
  opt.act = KGEN_LRPE_ACT_SILU, opt.dims = 1, opt.grid[0] = 15;  // 15 != n = 16
  EXPECT_EQ(kgen_md_lrpe_cosine_backward(&x, &theta, &o, &x, nullptr, &opt, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("grid:", 0), 0u) << kgen_last_error();
  // Workspace size: 0 without softmax over the sequence (no device needed); bad act, null output.
  std::size_t bytes = 7;
  EXPECT_EQ(kgen_lrpe_workspace_bytes(&x, KGEN_LRPE_ACT_SILU, 0, &bytes), KGEN_OK) << kgen_last_error();
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(kgen_lrpe_workspace_bytes(&x, 9, 0, &bytes), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("act:", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_lrpe_workspace_bytes(&x, KGEN_LRPE_ACT_NONE, 0, nullptr), KGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kgen_last_error()).rfind("bytes:", 0), 0u) << kgen_last_error();
  EXPECT_EQ(kgen_lrpe_workspace_bytes(&host_x, KGEN_LRPE_ACT_NONE, 0, &bytes), KGEN_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kgen
