// Uses the C++ and C APIs of an installed kgen, with or without a GPU: the version, a workspace
// size (pure arithmetic), and a call on host memory that kgen must refuse with a sentence naming
// the argument. Exit 0 when every answer is the expected one.
#include <kgen/c_api.h>
#include <kgen/kgen.hpp>

#include <cstdio>
#include <cstring>

int main() {
  std::printf("kgen %s (C API %s)\n", kgen::version(), kgen_version());
  if (std::strcmp(kgen::version(), kgen_version()) != 0) return 1;

  const std::int64_t shape[4] = {2, 8, 1024, 64};
  kgen::TensorView q = kgen::make_contiguous_view(reinterpret_cast<void*>(0x1000), kgen::DType::bf16, 4, shape, 0);
  const std::size_t bytes = kgen::attention_backward_workspace_bytes(q, {});
  std::printf("attention_backward workspace for (2, 8, 1024, 64): %zu bytes\n", bytes);
  if (bytes == 0) return 1;

  // A forward on host memory: refused, naming q.
  DLTensor t{};
  std::int64_t dl_shape[4] = {2, 8, 1024, 64};
  t.data = reinterpret_cast<void*>(0x1000);
  t.device = {kDLCPU, 0};
  t.ndim = 4;
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = dl_shape;
  const kgen_status s = kgen_attention_forward(&t, &t, &t, &t, nullptr, nullptr, nullptr);
  std::printf("kgen_attention_forward on host memory: status %d, \"%s\"\n", int(s), kgen_last_error());
  return s != KGEN_OK && std::strncmp(kgen_last_error(), "q", 1) == 0 ? 0 : 1;
}
