// Writes a run's checkpoints while training goes on. A save copies this rank's state into host
// buffers allocated once, and a background writer does the I/O, the checksums and (on rank 0)
// the commit, so the step waits only until the copy is taken. The writer never calls MPI: the
// training thread learns at each step boundary, with one small collective, whether every rank
// has written its part, and only then lets rank 0 commit. At most one save is in flight: the
// next one first waits for it. A crash at any moment leaves the previous committed step chosen
// (ckpt::commit_save's protocol), never the partial one.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/communicator.h"
#include "tessera/train/run_config.h"
#include "tessera/train/train_state.h"

namespace tessera::train {

class Checkpointer {
 public:
  Checkpointer(const std::filesystem::path& checkpoint_dir, const CheckpointConfig& config,
               dist::Communicator& world);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: starts saving the state as it is now, as `step` with `metadata`. With
  // checkpoint.async it returns once the writer has begun copying the state; nothing may change
  // the state before wait_for_snapshot() returns. Otherwise it returns once the step is committed.
  void save(int64_t step, TrainState& state, const nlohmann::json& metadata);
  // Blocks until the last save's copy of the state is taken; call before the state changes.
  void wait_for_snapshot();
  // Collective, once per step boundary on every rank: lets rank 0 commit a save that every rank
  // has written, and rethrows a writer's failure. Costs nothing while no save is in flight.
  void progress();
  // Collective: waits until the last save is committed (or failed, which throws).
  void finish();

  bool async() const { return async_; }
  // Seconds the calls above kept the training thread waiting, since construction.
  double stall_seconds() const { return stall_s_; }
  // The host buffers an asynchronous save copies the state into (0 before the first save).
  int64_t staging_bytes() const { return int64_t(staging_.size()); }

 private:
  enum class Phase { kIdle, kCopying, kWriting, kWritten, kCommitting, kFailed };
  struct Job {
    int64_t step = 0;
    nlohmann::json metadata;
    std::vector<NamedTensor> source;  // the state's views
    bool placed = false;              // every rank writes its part; rank 0 commits
  };

  Phase phase();
  void run_writer();
  void write(Job& job);
  void stage(const std::vector<NamedTensor>& source);
  void wait_until_written_everywhere();
  void rethrow_failure();

  std::filesystem::path dir_;
  int keep_last_;
  bool async_;
  dist::Communicator& world_;
  int rank_, ranks_;  // the writer thread must not ask the communicator
  double stall_s_ = 0;
  bool in_flight_ = false;  // a save that every rank started and that has not been committed

  // The writer's copy of the state: one buffer, tensors 64-byte aligned within it.
  std::vector<std::byte> staging_;
  std::vector<NamedTensor> staged_;

  std::mutex mutex_;
  std::condition_variable changed_;
  Phase phase_ = Phase::kIdle;
  bool commit_ = false, stop_ = false;
  Job job_;
  std::exception_ptr failure_;
  std::thread writer_;
};

}  // namespace tessera::train
