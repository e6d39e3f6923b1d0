#include "cache/fs_guard.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace kgen::cache {
namespace fs = std::filesystem;
namespace {

// True if `gid` is the user's private group: the user's primary group, named as the user, with
// no other members listed (Debian's and Fedora's default for new users, with umask 002).
bool is_private_group(gid_t gid) {
  const uid_t uid = ::geteuid();
  std::vector<char> buf(16384);
  struct passwd pw {}, *pw_out = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &pw_out) != 0 || !pw_out || pw.pw_gid != gid) return false;
  const std::string user = pw.pw_name;
  std::vector<char> gbuf(16384);
  struct group gr {}, *gr_out = nullptr;
  if (::getgrgid_r(gid, &gr, gbuf.data(), gbuf.size(), &gr_out) != 0 || !gr_out) return false;
  if (user != gr.gr_name) return false;
  for (char** m = gr.gr_mem; m && *m; ++m)
    if (user != *m) return false;
  return true;
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

bool shared_cache_mode() {
  const char* v = std::getenv("KGEN_CACHE_SHARED");
  return v && std::string_view(v) == "1";
}

mode_t private_dir_mode() { return shared_cache_mode() ? 02770 : 0700; }
mode_t private_file_mode() { return shared_cache_mode() ? 0660 : 0600; }

std::string check_directory(const fs::path& path, DirRule rule) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return path.string() + ": " + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) {
    if (!rule.follow_link) return path.string() + " is a symbolic link (kgen does not follow links inside a cache)";
    if (::stat(path.c_str(), &st) != 0) return path.string() + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return path.string() + " is not a directory";
  const uid_t me = ::geteuid();
  if (st.st_uid != me && !(rule.root_may_own && st.st_uid == 0))
    return path.string() + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(me) + ")";
  if (st.st_mode & S_IWOTH)
    return path.string() + " is writable by every user (mode " + octal(st.st_mode) + "): run `chmod o-w " +
           path.string() + "`";
  if ((st.st_mode & S_IWGRP) && !shared_cache_mode() && !is_private_group(st.st_gid))
    return path.string() + " is writable by its group (mode " + octal(st.st_mode) + "): run `chmod g-w " +
           path.string() + "`, or set KGEN_CACHE_SHARED=1 for a cache shared by a group";
  return "";
}

std::string ensure_directory(const fs::path& path, DirRule rule) {
  if (::mkdir(path.c_str(), private_dir_mode()) == 0) {
    // mkdir applies the umask; a shared cache wants its group bits whatever the umask says.
    if (shared_cache_mode()) ::chmod(path.c_str(), private_dir_mode());
  } else if (errno != EEXIST) {
    return path.string() + ": " + std::strerror(errno);
  }
  return check_directory(path, rule);
}

int open_regular_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

int create_new_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, private_file_mode());
  if (fd >= 0 && shared_cache_mode()) ::fchmod(fd, private_file_mode());
  return fd;
}

bool remove_anything(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || status.type() == fs::file_type::not_found) return true;
  // remove_all does not follow links: a directory's links are removed, not their targets.
  if (status.type() == fs::file_type::directory) fs::remove_all(path, ec);
  else fs::remove(path, ec);
  return !fs::exists(fs::symlink_status(path, ec));
}

}  // namespace kgen::cache
