// The process-wide table of loaded kernels for operators launched through several kernels:
// (device, variant key) → LoadedKernel. A hit hashes only the short key, never source text; a
// miss renders, builds through the cache (KernelBuilder::global()) and loads, once per key.
#pragma once

#include <functional>
#include <string>

#include "generator/kernel_source.h"
#include "driver/device.h"

namespace kgen {

const LoadedKernel& loaded_kernel(int device, const std::string& key, const std::function<KernelSource()>& render);

// Launches `k` on `stream` with one by-value parameter struct (the kernels' only argument).
void launch_kernel(const LoadedKernel& k, unsigned gx, unsigned gy, unsigned gz, void* params, void* stream,
                   const char* what);

}  // namespace kgen
