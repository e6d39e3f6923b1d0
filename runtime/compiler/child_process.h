// Running a compiler tool (clang, llvm-objdump) as a child process: kgen's clang backend and
// `kgen inspect --show isa`. A tool that crashes or hangs costs one error, never the host process.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kgen {

struct ChildResult {
  int exit_code = -1;     // the tool's exit status; -1 when it was killed or did not start
  bool timed_out = false;
  std::string output;     // stdout and stderr together
};

// Runs argv[0] (a path, or a name searched on PATH) with `argv`, stdin from /dev/null, and waits
// at most `timeout` (then kills it). Throws Error(compile_error) only when no child could be
// started at all.
ChildResult run_child(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// The first of `candidates` that is an executable file, or a name found on PATH; empty if none.
std::string find_executable(const std::vector<std::string>& candidates);

}  // namespace kgen
