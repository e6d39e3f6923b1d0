// Helpers shared by the tuning tests: scratch directories, whole-file I/O, shard headers, the
// H100 context the shards are written under, and capturing kgen's log.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tuning/tuning_db.h"

namespace kgen {

namespace fs = std::filesystem;

inline const DeviceClass kH100{"NVIDIA H100 80GB HBM3", "sm_90a", 132};
inline const TuningContext kCtx{"0.1.0", "nvrtc 13.0", kH100};

// A fresh directory under the system's temp directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kgen-tuning-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// A shard's header line for `c`.
inline std::string header(const TuningContext& c = kCtx, int schema = 1) {
  return to_json_line(TuningShardHeader{schema, c.kgen_version, c.compiler, c.device}) + "\n";
}

// Captures kgen's log (stderr) around `f`.
template <class F>
std::string captured_log(F&& f) {
  testing::internal::CaptureStderr();
  f();
  return testing::internal::GetCapturedStderr();
}

}  // namespace kgen
