// The kernel template headers, embedded in the library at build time so a deployed binary
// needs no source tree and no CUDA toolkit headers.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace kgen::generator {

struct EmbeddedTemplate {
  const char* name;  // include name, e.g. "kgen_device/attention/forward_fa2.cuh"
  const char* text;
};

// Every embedded template header, sorted by name.
std::span<const EmbeddedTemplate> embedded_templates();

// The templates as the runtime compilers (NVRTC, hiprtc) take in-memory headers: parallel arrays
// of include names and texts, in embedded_templates() order.
struct TemplateHeaders {
  std::vector<const char*> names, texts;
};
inline const TemplateHeaders& template_headers() {
  static const TemplateHeaders headers = [] {
    TemplateHeaders h;
    for (const EmbeddedTemplate& t : embedded_templates()) {
      h.names.push_back(t.name);
      h.texts.push_back(t.text);
    }
    return h;
  }();
  return headers;
}

// SHA-256 over all template names and texts: the generator's identity in cache keys.
std::string_view templates_digest();

}  // namespace kgen::generator
