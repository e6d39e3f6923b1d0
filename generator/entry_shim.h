// The one emitter of entry shims: a rendered translation unit is an #include of the op's template
// header plus, per kernel, an extern "C" __global__ function that instantiates one template with
// named arguments, so a rendered source says what it instantiates:
//
//   extern "C" __global__ void __launch_bounds__(256, 1) kgen_attention_fwd(const kgen::AttentionForwardParams p) {
//     kgen::attention_forward_fa2</*T=*/kgen::bfloat16_t, /*D=*/128, /*BM=*/128, ...>(p);
//   }
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kgen/types.hpp"

namespace kgen {

// One template argument: the template parameter's name and the value passed.
struct TemplateArg {
  std::string name;
  std::string value;
};

TemplateArg targ(std::string name, int value);
TemplateArg targ(std::string name, bool value);
TemplateArg targ(std::string name, std::string value);
// The device element type of `dtype` ("kgen::bfloat16_t", "kgen::half_t", "float").
TemplateArg targ_type(std::string name, DType dtype);

struct EntryShim {
  std::string entry;     // extern "C" kernel name
  int threads = 0;       // __launch_bounds__'s maxThreadsPerBlock
  int min_blocks = 0;    // its minBlocksPerMultiprocessor; 0 leaves the argument out
  std::string params;    // parameter struct in namespace kgen: "AttentionForwardParams"
  std::string function;  // device template in namespace kgen: "attention_forward_fa2", "lrpe::lrpe_forward"
  std::vector<TemplateArg> args;
  bool grid_constant = false;  // pass it as a __grid_constant__ (the kernel takes its address: TMA maps)
  // An attention variant's kernel: the entry takes a second parameter, `KGEN_VARIANT_ARGS va`
  // (kgen_device/attention/variant.cuh: a const __grid_constant__ VariantArgs on NVIDIA), and
  // passes `&va` after p.
  bool variant_args = false;
};

// The translation unit: `#include "header"`, a comment naming `variant`, then `prelude` (code at
// namespace scope that the shims may name, e.g. a variant's struct), then each shim.
std::string render_entry_shims(std::string_view header, std::string_view variant, std::span<const EntryShim> shims,
                               std::string_view prelude = {});

}  // namespace kgen
