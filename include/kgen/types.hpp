// Value types shared by kgen's public API and its internals.
#pragma once

#include <stdexcept>
#include <string>

namespace kgen {

// Element types of kernel inputs and outputs.
// i32 serves index tensors of attention variants (document ids) only; f8e4m3 (OCP FP8 E4M3,
// PyTorch's float8_e4m3fn) the inputs of the FP8 attention forward (attention_forward_fp8).
enum class DType { f16, bf16, f32, i32, f8e4m3 };

// The activation of lrpe_cosine / md_lrpe_cosine applied to x before the rotation
// (docs/lrpe.md §1): softmax over the features of each row (dim −1), or over the sequence of
// each (batch, head, feature) column (dim −2 of a (b, h, n, d) tensor).
enum class LrpeAct { none, relu, sigmoid, silu, softmax, softmax_seq };

// What went wrong, matching kgen_status in the C API.
enum class Status {
  ok = 0,
  invalid_argument = 1,  // a tensor or option is unsupported; the message names it
  no_device = 2,         // no driver or GPU here
  compile_error = 3,     // the run-time compiler failed; the message carries its log
  cuda_error = 4,        // a driver call failed
  cache_error = 5,       // the binary cache could neither serve nor store an entry
  internal = 6,
};

// The one exception type kgen throws: a status plus one clear sentence.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace kgen
