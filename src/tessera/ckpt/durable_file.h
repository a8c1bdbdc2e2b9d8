// Files written so that a crash leaves either the old content or the new, never a mix: writes
// that retry until complete, fsync of files and of their directories, renames that fail loudly.
#pragma once

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

namespace tessera::ckpt {

// Linux moves at most ~2 GiB per read/write call.
constexpr size_t kMaxIoBytes = size_t{1} << 30;

[[noreturn]] void fail_errno(const std::filesystem::path& path, const char* what);

// Writes all of data, or with stop_on_einval returns how much it wrote before the kernel refused
// a write with EINVAL (O_DIRECT on a file system that takes the flag but not the writes).
size_t write_fully(int fd, const std::filesystem::path& path, const void* data, size_t size,
                   bool stop_on_einval = false);

// An open file descriptor whose every failure is an Error naming the file.
class File {
 public:
  File(const std::filesystem::path& path, int flags);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  void write_all(const void* data, size_t size) { write_fully(fd_, path_, data, size); }
  // Returns false on end of file before `size` bytes.
  bool pread_all(void* data, size_t size, uint64_t offset);
  uint64_t size() const;
  void sync();
  // close() can report a deferred write error, so it is checked rather than left to the
  // destructor.
  void close();

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// A rename or a new entry is durable only once its directory is fsynced.
void sync_dir(const std::filesystem::path& dir);
// Creates or replaces the file with `content`, synced to disk.
void write_durably(const std::filesystem::path& path, const std::string& content);
void rename_or_fail(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace tessera::ckpt
