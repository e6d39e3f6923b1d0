// gpt-oss's attention variant for the GPU tests of packed batches and paged K/V: a causal sliding
// window of `window` keys, softcap 30 and learnable sinks (normal, sd 1.5), set on the options,
// uploaded, and described for the fp64 reference.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "check/harness_support.h"
#include "check/reference_cpu.h"
#include "generator/variant.h"
#include "kgen/kgen.hpp"

namespace kgen {

struct GptOssVariant {
  std::vector<float> sinks;
  std::unique_ptr<Variant> variant;
  ReferenceVariant reference;
  std::unique_ptr<DeviceBuffer> device_sinks, device_sinks_grad;
  TensorView sinks_view, sinks_grad_view;

  // Sets options.variant to window (window, 0) + softcap 30 + sinks for h_q heads.
  void set(AttentionOptions& options, int window, int heads_q, std::mt19937_64& rng) {
    options.variant.window_left = window, options.variant.window_right = 0, options.variant.softcap = 30;
    VariantPresets presets;
    presets.window = presets.softcap = true;
    const VariantDecl decl = compose_variant(presets, {});
    variant = std::make_unique<Variant>(Variant::parse(decl));
    reference.variant = variant.get();
    for (const auto& s : decl.scalars)
      reference.values.scalars.push_back(s.name == "window_left" ? window : s.name == "window_right" ? 0 : 30);
    std::normal_distribution<float> n(0.f, 1.5f);
    for (int h = 0; h < heads_q; ++h) sinks.push_back(n(rng)), reference.sinks.push_back(sinks.back());
    const std::int64_t shape[1] = {heads_q};
    device_sinks = std::make_unique<DeviceBuffer>(sinks.size() * 4);
    device_sinks->upload(sinks.data());
    sinks_view = make_contiguous_view(device_sinks->get(), DType::f32, 1, shape, 0);
    device_sinks_grad = std::make_unique<DeviceBuffer>(sinks.size() * 4);
    sinks_grad_view = make_contiguous_view(device_sinks_grad->get(), DType::f32, 1, shape, 0);
    options.variant.sinks = &sinks_view;
  }
  // The reference's variant, or null when none was set.
  const ReferenceVariant* get() const { return variant ? &reference : nullptr; }
};

}  // namespace kgen
