// A rendered kernel: the translation unit plus what the runtime needs to launch it.
#pragma once

#include <string>

namespace kgen {

struct KernelSource {
  std::string op;       // operator name: "attention_fwd", ...
  std::string variant;  // canonical variant name, unique within the op (spec + config)
  std::string source;   // the complete translation unit handed to the compiler
  std::string entry;    // extern "C" kernel name in `source`
  int threads = 0;      // threads per block
  int smem_bytes = 0;   // dynamic shared memory per block
};

// One field of a config's text form and what it means for the kernel (`kgen inspect --explain`).
struct ConfigField {
  std::string text;     // as written in the config, e.g. "bm128"
  std::string meaning;  // one line, with the field's value in words
};

// Grid of one launch (blocks along x, y, z).
struct LaunchGrid {
  unsigned x = 1, y = 1, z = 1;
};

// The compact grid of a packed batch (templates/kgen_device/attention/packed_grid.cuh): x =
// ⌊rows / tile⌋ + sequences blocks per lane (rows: the tensors' n; 0 without sequences, so the
// launch is skipped), y = lanes (heads). The backward's kernel takes the sequence count back as
// x − ⌊rows / tile⌋.
inline LaunchGrid packed_tile_grid(long long rows, int tile, int sequences, int lanes) {
  return {static_cast<unsigned>(sequences > 0 ? rows / tile + sequences : 0), static_cast<unsigned>(lanes), 1};
}

}  // namespace kgen
