// The cache's file-system rules, as a trust boundary (docs/cache.md, "Threat model"):
//   - directories kgen creates are 0700 (a shared cache, KGEN_CACHE_SHARED=1: 02770) and files
//     0600 (shared: 0660), whatever the umask;
//   - a directory is used only if it is a real directory (never a symbolic link below the root),
//     owned by this user (a read-only layer may also be owned by root) and not writable by others
//     (group-writable only in a shared cache, or when the group is the user's private group);
//   - files are created with O_CREAT|O_EXCL|O_NOFOLLOW and opened for reading with
//     O_NOFOLLOW|O_NONBLOCK, then checked with fstat to be regular files: a symbolic link, FIFO,
//     device or directory at an entry's path is never followed, never blocks, and counts as
//     damage.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace kgen::cache {

// KGEN_CACHE_SHARED=1: the cache is shared by a group (group-writable directories and files).
bool shared_cache_mode();

// Mode bits for what kgen creates: 0700 / 0600, or 02770 / 0660 in a shared cache.
mode_t private_dir_mode();
mode_t private_file_mode();

// How check_directory() treats the directory.
struct DirRule {
  bool follow_link = false;   // the path may be a symbolic link (the root only: ~/.cache may be one)
  bool root_may_own = false;  // owned by root is also accepted (a read-only, pre-warmed layer)
};

// Why the directory at `path` must not be used (it is missing, a symbolic link where the rule
// forbids one, not a directory, owned by someone else, or writable by others), or "" if it may.
std::string check_directory(const std::filesystem::path& path, DirRule rule = {});

// Makes `path` (the parent must exist) with private_dir_mode() if missing, then checks it with
// check_directory(path, rule). Returns "" or why it cannot be used.
std::string ensure_directory(const std::filesystem::path& path, DirRule rule = {});

// Opens an existing file for reading without following a final symbolic link and without
// blocking (a FIFO), and checks that it is a regular file. Returns the descriptor, or -1 with
// errno set (ELOOP for a symbolic link, EINVAL for anything but a regular file).
int open_regular_file(const std::filesystem::path& path);

// Creates a new file (O_CREAT|O_EXCL|O_NOFOLLOW, private_file_mode()) for writing. Returns the
// descriptor, or -1 with errno set.
int create_new_file(const std::filesystem::path& path);

// Removes whatever is at `path` without following a symbolic link there: a file, link, FIFO or
// (the whole tree of) a directory. Returns true if nothing is there afterwards.
bool remove_anything(const std::filesystem::path& path);

}  // namespace kgen::cache
