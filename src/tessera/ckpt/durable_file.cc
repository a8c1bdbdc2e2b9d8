#include "tessera/ckpt/durable_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

void fail_errno(const fs::path& path, const char* what) {
  fail("{}: {}: {}", path.string(), what, std::strerror(errno));
}

size_t write_fully(int fd, const fs::path& path, const void* data, size_t size,
                   bool stop_on_einval) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, std::min(size - done, kMaxIoBytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && stop_on_einval) break;
    if (n < 0) fail_errno(path, "write failed");
    done += static_cast<size_t>(n);
  }
  return done;
}

File::File(const fs::path& path, int flags) : path_(path) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_errno(path, "cannot open");
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

bool File::pread_all(void* data, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd_, p, std::min(size, kMaxIoBytes), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path_, "read failed");
    if (n == 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail_errno(path_, "cannot stat");
  return static_cast<uint64_t>(st.st_size);
}

void File::sync() {
  if (::fsync(fd_) != 0) fail_errno(path_, "fsync failed");
}

void File::close() {
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail_errno(path_, "close failed");
}

void sync_dir(const fs::path& dir) {
  File d(dir, O_RDONLY | O_DIRECTORY);
  d.sync();
  d.close();
}

void write_durably(const fs::path& path, const std::string& content) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  f.write_all(content.data(), content.size());
  f.sync();
  f.close();
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    fail("{}: cannot rename to {}: {}", from.string(), to.string(), std::strerror(errno));
  }
}

}  // namespace tessera::ckpt
