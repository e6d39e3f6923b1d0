// Every parser of a config, spec or variant-key string, and of byte sizes: each returns a value
// or nullopt; a value prints back to a string that parses to the same value.
#include <string>

#include "base/size.h"
#include "generator/attention_backward.h"
#include "generator/attention_forward.h"
#include "generator/lrpe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kgen;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto c = parse_attention_forward_config(text)) {
    auto again = parse_attention_forward_config(to_string(*c));
    if (!again || to_string(*again) != to_string(*c)) std::abort();
  }
  if (auto c = parse_attention_backward_config(text)) {
    auto again = parse_attention_backward_config(to_string(*c));
    if (!again || *again != *c || to_string(*again) != to_string(*c)) std::abort();
  }
  if (auto c = parse_attention_double_backward_config(text)) {
    auto again = parse_attention_double_backward_config(to_string(*c));
    if (!again || *again != *c || to_string(*again) != to_string(*c)) std::abort();
  }
  if (auto c = parse_lrpe_config(text)) {
    auto again = parse_lrpe_config(to_string(*c));
    if (!again || to_string(*again) != to_string(*c)) std::abort();
  }
  (void)parse_attention_forward_spec(text);
  (void)parse_attention_backward_spec(text);
  (void)parse_attention_backward_variant_key(text);
  (void)parse_double_backward_variant_key(text);
  (void)parse_lrpe_spec(text);
  (void)parse_lrpe_variant_key(text);
  (void)parse_byte_size(text, "fuzz");
  return 0;
}
