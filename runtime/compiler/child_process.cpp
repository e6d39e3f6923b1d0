#include "compiler/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kgen/types.hpp"

extern char** environ;

namespace kgen {
namespace {

// A temporary file holding the child's output, removed with this object.
struct OutputFile {
  std::string path;
  int fd = -1;
  OutputFile() {
    std::string templ = (std::filesystem::temp_directory_path() / "kgen-child-XXXXXX").string();
    fd = mkstemp(templ.data());
    if (fd < 0) throw Error(Status::compile_error, "cannot create a temporary file: " + std::string(std::strerror(errno)));
    path = templ;
  }
  ~OutputFile() {
    close(fd);
    unlink(path.c_str());
  }
  std::string read_all() const {
    std::string out;
    char buf[8192];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }
};

}  // namespace

std::string find_executable(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (c.empty()) continue;
    if (c.find('/') != std::string::npos) {
      if (access(c.c_str(), X_OK) == 0) return c;
      continue;
    }
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/bin";
    for (std::size_t start = 0; start <= dirs.size();) {
      std::size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      const std::string file = dirs.substr(start, end - start) + "/" + c;
      if (end > start && access(file.c_str(), X_OK) == 0) return file;
      start = end + 1;
    }
  }
  return {};
}

ChildResult run_child(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  OutputFile out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out.fd, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(Status::compile_error, "cannot run " + argv[0] + ": " + std::strerror(rc));

  ChildResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(20))) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
  }
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.output = out.read_all();
  if (!result.timed_out && WIFSIGNALED(status))
    result.output += "\n(" + argv[0] + " was killed by signal " + std::to_string(WTERMSIG(status)) + ")";
  return result;
}

}  // namespace kgen
