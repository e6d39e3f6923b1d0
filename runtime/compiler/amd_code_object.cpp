#include "compiler/amd_code_object.h"

#include <elf.h>

#include <cstring>
#include <map>
#include <string_view>

#include "kgen/types.hpp"

namespace kgen {
namespace {

[[noreturn]] void malformed(const std::string& why) {
  throw Error(Status::compile_error, "not a readable AMD code object: " + why);
}

// A bounds-checked copy of an ELF structure (<elf.h>) at byte `at` of the object (kgen runs on
// little-endian hosts, as the objects are).
template <class T>
T read_struct(std::span<const std::uint8_t> b, std::uint64_t at) {
  if (at > b.size() || b.size() - at < sizeof(T)) malformed("it is truncated");
  T out;
  std::memcpy(&out, b.data() + at, sizeof(T));
  return out;
}

// The subset of MessagePack the AMDGPU metadata uses: maps, arrays, strings, integers, booleans,
// nil, floats and binary (the last two skipped). Values kgen reads are kept as integers or
// strings; containers are walked with a depth limit. (nlohmann-json's from_msgpack would parse
// the note too, but it recurses once per nesting level without a limit, and a note can come from
// the cache, the trust boundary of docs/cache.md: a deeply nested one would overflow the stack.)
class MsgPack {
 public:
  explicit MsgPack(std::span<const std::uint8_t> data) : d_(data) {}

  struct Value {
    enum class Kind { integer, string, map, array, other } kind = Kind::other;
    long long integer = 0;
    std::string string;
    std::uint32_t count = 0;  // map entries or array elements, to be read next
  };

  Value next() {
    const std::uint8_t c = byte();
    Value v;
    if (c <= 0x7f) return integer(c);
    if (c >= 0xe0) return integer(static_cast<std::int8_t>(c));
    if ((c & 0xf0) == 0x80) return container(Value::Kind::map, c & 0x0f);
    if ((c & 0xf0) == 0x90) return container(Value::Kind::array, c & 0x0f);
    if ((c & 0xe0) == 0xa0) return string(c & 0x1f);
    switch (c) {
      case 0xc0: case 0xc2: case 0xc3: return v;                    // nil, false, true
      case 0xc4: skip(uint(1)); return v;                            // bin 8/16/32
      case 0xc5: skip(uint(2)); return v;
      case 0xc6: skip(uint(4)); return v;
      case 0xca: skip(4); return v;                                  // float 32/64
      case 0xcb: skip(8); return v;
      case 0xcc: return integer(static_cast<long long>(uint(1)));   // uint 8..64
      case 0xcd: return integer(static_cast<long long>(uint(2)));
      case 0xce: return integer(static_cast<long long>(uint(4)));
      case 0xcf: return integer(static_cast<long long>(uint(8)));
      case 0xd0: return integer(static_cast<std::int8_t>(uint(1)));  // int 8..64
      case 0xd1: return integer(static_cast<std::int16_t>(uint(2)));
      case 0xd2: return integer(static_cast<std::int32_t>(uint(4)));
      case 0xd3: return integer(static_cast<long long>(uint(8)));
      case 0xd9: return string(uint(1));                             // str 8/16/32
      case 0xda: return string(uint(2));
      case 0xdb: return string(uint(4));
      case 0xdc: return container(Value::Kind::array, uint(2));
      case 0xdd: return container(Value::Kind::array, uint(4));
      case 0xde: return container(Value::Kind::map, uint(2));
      case 0xdf: return container(Value::Kind::map, uint(4));
      default: malformed("its metadata note has an unknown MessagePack byte");
    }
  }

  // Skips one whole value (with its contents).
  void skip_value(int depth = 0) {
    if (depth > 32) malformed("its metadata note nests too deeply");
    const Value v = next();
    if (v.kind == Value::Kind::map)
      for (std::uint32_t i = 0; i < 2 * v.count; ++i) skip_value(depth + 1);
    if (v.kind == Value::Kind::array)
      for (std::uint32_t i = 0; i < v.count; ++i) skip_value(depth + 1);
  }

 private:
  std::uint8_t byte() {
    if (at_ >= d_.size()) malformed("its metadata note is truncated");
    return d_[at_++];
  }
  std::uint64_t uint(int n) {  // big-endian, as MessagePack stores numbers
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | byte();
    return v;
  }
  void skip(std::uint64_t n) {
    if (n > d_.size() - at_) malformed("its metadata note is truncated");
    at_ += n;
  }
  static Value integer(long long x) {
    Value v;
    v.kind = Value::Kind::integer, v.integer = x;
    return v;
  }
  Value string(std::uint64_t n) {
    if (n > d_.size() - at_) malformed("its metadata note is truncated");
    Value v;
    v.kind = Value::Kind::string;
    v.string.assign(reinterpret_cast<const char*>(d_.data() + at_), n);
    at_ += n;
    return v;
  }
  Value container(Value::Kind kind, std::uint64_t n) {
    // Every element takes at least one byte: a larger count is a damaged note.
    if (n > d_.size() - at_) malformed("its metadata note is truncated");
    Value v;
    v.kind = kind, v.count = static_cast<std::uint32_t>(n);
    return v;
  }

  std::span<const std::uint8_t> d_;
  std::size_t at_ = 0;
};

AmdTarget::Feature feature(unsigned bits) {
  switch (bits) {
    case 1: return AmdTarget::Feature::any;
    case 2: return AmdTarget::Feature::off;
    case 3: return AmdTarget::Feature::on;
    default: return AmdTarget::Feature::unsupported;
  }
}

// One "amdhsa.kernels" entry: a map from ".name", ".vgpr_count", ... to values.
AmdKernelResources read_kernel(MsgPack& m) {
  const auto entry = m.next();
  if (entry.kind != MsgPack::Value::Kind::map) malformed("a kernel entry of its metadata is not a map");
  AmdKernelResources k;
  const std::map<std::string_view, int*> fields = {
      {".vgpr_count", &k.vgpr_count},
      {".agpr_count", &k.agpr_count},
      {".sgpr_count", &k.sgpr_count},
      {".vgpr_spill_count", &k.vgpr_spill_count},
      {".sgpr_spill_count", &k.sgpr_spill_count},
      {".group_segment_fixed_size", &k.lds_bytes},
      {".private_segment_fixed_size", &k.scratch_bytes},
      {".wavefront_size", &k.wavefront_size},
      {".max_flat_workgroup_size", &k.max_flat_workgroup_size}};
  for (std::uint32_t i = 0; i < entry.count; ++i) {
    const auto key = m.next();
    if (key.kind != MsgPack::Value::Kind::string) {
      m.skip_value();
      continue;
    }
    if (key.string == ".name") {
      const auto v = m.next();
      if (v.kind != MsgPack::Value::Kind::string) malformed("a kernel's .name is not a string");
      k.name = v.string;
    } else if (auto f = fields.find(key.string); f != fields.end()) {
      const auto v = m.next();
      if (v.kind != MsgPack::Value::Kind::integer) malformed("a kernel's " + key.string + " is not an integer");
      *f->second = static_cast<int>(v.integer);
    } else {
      m.skip_value(1);
    }
  }
  return k;
}

std::vector<AmdKernelResources> read_metadata(std::span<const std::uint8_t> note) {
  MsgPack m(note);
  const auto root = m.next();
  if (root.kind != MsgPack::Value::Kind::map) malformed("its metadata note is not a map");
  std::vector<AmdKernelResources> kernels;
  for (std::uint32_t i = 0; i < root.count; ++i) {
    const auto key = m.next();
    if (key.kind == MsgPack::Value::Kind::string && key.string == "amdhsa.kernels") {
      const auto list = m.next();
      if (list.kind != MsgPack::Value::Kind::array) malformed("its amdhsa.kernels is not an array");
      for (std::uint32_t k = 0; k < list.count; ++k) kernels.push_back(read_kernel(m));
    } else {
      m.skip_value(1);
    }
  }
  return kernels;
}

}  // namespace

std::string AmdTarget::id() const {
  std::string s = processor;
  if (sramecc == Feature::on) s += ":sramecc+";
  if (sramecc == Feature::off) s += ":sramecc-";
  if (xnack == Feature::on) s += ":xnack+";
  if (xnack == Feature::off) s += ":xnack-";
  return s;
}

std::optional<std::string> amdgpu_processor_name(unsigned mach) {
  // EF_AMDGPU_MACH values of the processors kgen knows (LLVM's AMDGPUUsage table).
  switch (mach) {
    case 0x30: return "gfx908";
    case 0x36: return "gfx1030";
    case 0x3f: return "gfx90a";
    case 0x40: return "gfx940";
    case 0x41: return "gfx1100";
    case 0x4b: return "gfx941";
    case 0x4c: return "gfx942";
    case 0x4f: return "gfx950";
    default: return std::nullopt;
  }
}

AmdCodeObject read_amd_code_object(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0)
    malformed("it is not an ELF file");
  if (bytes[EI_CLASS] != ELFCLASS64 || bytes[EI_DATA] != ELFDATA2LSB) malformed("it is not a 64-bit little-endian ELF");
  const auto ehdr = read_struct<Elf64_Ehdr>(bytes, 0);
  const unsigned machine = ehdr.e_machine;
  if (machine != kElfMachineAmdgpu)
    malformed("its ELF machine is " + std::to_string(machine) + ", not AMDGPU (" + std::to_string(kElfMachineAmdgpu) + ")");
  const unsigned flags = ehdr.e_flags;
  AmdCodeObject out;
  const auto name = amdgpu_processor_name(flags & 0xff);
  if (!name) malformed("kgen does not know its processor (e_flags mach 0x" + [&] {
    static const char* hex = "0123456789abcdef";
    return std::string{hex[(flags >> 4) & 0xf], hex[flags & 0xf]};
  }() + ")");
  out.target.processor = *name;
  out.target.xnack = feature((flags >> 8) & 3);
  out.target.sramecc = feature((flags >> 10) & 3);

  // The metadata note: a SHT_NOTE section holding an "AMDGPU" note of type 32
  // (NT_AMDGPU_METADATA) whose descriptor is MessagePack.
  const std::uint64_t shoff = ehdr.e_shoff, shentsize = ehdr.e_shentsize, shnum = ehdr.e_shnum;
  if (shnum > 0 && shentsize < sizeof(Elf64_Shdr)) malformed("its section headers are too small");
  if (shnum > 0 && shoff > bytes.size()) malformed("it is truncated");
  bool found = false;
  for (std::uint64_t i = 0; i < shnum && !found; ++i) {
    const auto shdr = read_struct<Elf64_Shdr>(bytes, shoff + i * shentsize);
    if (shdr.sh_type != SHT_NOTE) continue;
    const std::uint64_t off = shdr.sh_offset, size = shdr.sh_size;
    if (off > bytes.size() || size > bytes.size() - off) malformed("a note section lies past its end");
    for (std::uint64_t at = off; at + sizeof(Elf64_Nhdr) <= off + size;) {
      const auto nhdr = read_struct<Elf64_Nhdr>(bytes, at);
      const std::uint64_t namesz = nhdr.n_namesz, descsz = nhdr.n_descsz, type = nhdr.n_type;
      const std::uint64_t name_at = at + sizeof(Elf64_Nhdr), desc_at = name_at + (namesz + 3) / 4 * 4;
      if (desc_at > off + size || descsz > off + size - desc_at) malformed("a note lies past its section");
      const std::string_view note_name(reinterpret_cast<const char*>(bytes.data() + name_at), namesz);
      if (type == 32 && note_name.starts_with("AMDGPU")) {
        out.kernels = read_metadata(bytes.subspan(desc_at, descsz));
        found = true;
        break;
      }
      at = desc_at + (descsz + 3) / 4 * 4;
    }
  }
  if (!found) malformed("it has no AMDGPU metadata note");
  return out;
}

}  // namespace kgen
