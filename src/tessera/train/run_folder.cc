#include "tessera/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tessera/core/error.h"

namespace tessera::train {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// What the job holding the lock wrote into it; empty if it has not written it yet.
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder(text, n > 0 ? size_t(n) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / kRunFolderLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("{}: cannot open the run folder's lock: {}", path.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = holder_of(fd_);
    ::close(fd_);
    if (error == EWOULDBLOCK) {
      fail(
          "{}: another training job ({}) is writing this run folder; stop it or choose another "
          "--out",
          run_dir.string(), holder.empty() ? "starting up" : holder);
    }
    fail("{}: cannot lock the run folder: {}", path.string(), std::strerror(error));
  }
  const std::string holder = fmt::format("pid {} on host {}\n", ::getpid(), host_name());
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size())) {
    const int error = errno;
    ::close(fd_);
    fail("{}: cannot write the run folder's lock: {}", path.string(), std::strerror(error));
  }
}

RunFolderLock::~RunFolderLock() { ::close(fd_); }  // closing the file releases the lock

}  // namespace tessera::train
