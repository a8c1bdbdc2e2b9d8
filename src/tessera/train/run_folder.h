// The lock that lets one training job at a time write a run folder: two jobs writing the same
// checkpoints, metrics and dataset would interleave their files and corrupt all of them.
#pragma once

#include <filesystem>

namespace tessera::train {

inline constexpr char kRunFolderLockFile[] = ".lock";

// Holds an exclusive flock(2) on <run_dir>/.lock while it lives, with "pid N on host H" written
// into the file for the error another job gets. The kernel drops the lock when the process ends,
// however it ends, so a crashed job never leaves the folder locked. Under mpirun only rank 0
// takes it: the job's other ranks share the folder legitimately.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::filesystem::path& run_dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace tessera::train
