// The kernel template headers, embedded in the library at build time so a deployed binary
// needs no source tree and no CUDA toolkit headers.
#pragma once

#include <span>
#include <string_view>

namespace kgen::generator {

struct EmbeddedTemplate {
  const char* name;  // include name, e.g. "kgen_device/attention/forward_fa2.cuh"
  const char* text;
};

// Every embedded template header, sorted by name.
std::span<const EmbeddedTemplate> embedded_templates();

// SHA-256 over all template names and texts: the generator's identity in cache keys.
std::string_view templates_digest();

}  // namespace kgen::generator
