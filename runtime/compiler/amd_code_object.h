// Reading AMD GPU code objects (the ELF that hiprtc or clang's HIP device compile produces):
// the target from the ELF header, and each kernel's resources from the AMDGPU metadata note.
// No ROCm library is needed: the cache's wrong-target guard and the resource checks of every
// AMD variant (VGPRs, AGPRs, SGPRs, LDS, scratch, spills, wave size) run on any machine.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kgen {

// The processor of a code object: the name ("gfx942") and its feature settings as the ELF header
// records them (code object v4+: each of xnack and sramecc is unsupported, any, off or on).
struct AmdTarget {
  enum class Feature { unsupported, any, off, on };
  std::string processor;  // "gfx90a", "gfx942", "gfx950", "gfx1100", ...
  Feature xnack = Feature::unsupported;
  Feature sramecc = Feature::unsupported;
  // The target id as compilers spell it: the processor, then ":sramecc±" and ":xnack±" for the
  // features that are on or off ("gfx90a:xnack+"; "any" adds nothing).
  std::string id() const;
};

// One kernel's resources, from the metadata note's "amdhsa.kernels" entry.
struct AmdKernelResources {
  std::string name;
  int vgpr_count = 0, agpr_count = 0, sgpr_count = 0;
  int vgpr_spill_count = 0, sgpr_spill_count = 0;
  int lds_bytes = 0;      // .group_segment_fixed_size
  int scratch_bytes = 0;  // .private_segment_fixed_size (per work-item)
  int wavefront_size = 0;
  int max_flat_workgroup_size = 0;
};

struct AmdCodeObject {
  AmdTarget target;
  std::vector<AmdKernelResources> kernels;
};

// ELF e_machine of AMD GPU code objects.
inline constexpr int kElfMachineAmdgpu = 224;

// The processor name of an e_flags mach value (e_flags & 0xff), or nullopt if kgen does not
// know it.
std::optional<std::string> amdgpu_processor_name(unsigned mach);

// Parses `bytes` as an AMD code object. Throws Error(compile_error) with one sentence saying what
// is wrong (not an ELF, another machine, a truncated or malformed note) rather than reading past
// the end: the input may be a damaged cache entry.
AmdCodeObject read_amd_code_object(std::span<const std::uint8_t> bytes);

}  // namespace kgen
