// Helpers for the fuzz targets: a private scratch directory for the process and a file holding
// one input.
#pragma once

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace kgen::fuzz {

// A directory of this process's own under $TMPDIR, made on first use.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string templ = (std::filesystem::temp_directory_path() / "kgen-fuzz-XXXXXX").string();
    if (!::mkdtemp(templ.data())) std::abort();
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Writes `data` to <scratch>/`name` and returns its path.
inline std::filesystem::path input_file(const char* name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratch() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
  return path;
}

}  // namespace kgen::fuzz
