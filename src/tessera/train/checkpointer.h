// Writes a run's checkpoints while training goes on. A save copies this rank's state, checksummed
// as it goes, into a host image of its data file allocated once, and a background writer hands
// that image to the disk and (on rank 0) commits, so the step waits only until the copy is taken.
// The writer never calls MPI: the training thread learns at each step boundary, with one small
// collective, whether every rank has written its part, and only then lets rank 0 commit. At most
// one save is in flight: the next one first waits for it. A crash at any moment leaves the previous
// committed step chosen (ckpt::commit_save's protocol), never the partial one.
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

#include "tessera/ckpt/data_image.h"
#include "tessera/comm/communicator.h"
#include "tessera/core/tensor.h"
#include "tessera/train/run_config.h"
#include "tessera/train/train_state.h"

namespace tessera::train {

class Checkpointer {
 public:
  Checkpointer(const std::filesystem::path& checkpoint_dir, const CheckpointConfig& config,
               comm::Communicator& world);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: starts saving the state as it is now, as `step` with `metadata`. With
  // checkpoint.async it returns once the state is copied, and the writer goes on alone; otherwise
  // once the step is committed.
  void save(int64_t step, TrainState& state, const nlohmann::json& metadata);
  // Collective, once per step boundary on every rank: lets rank 0 commit a save that every rank
  // has written, and rethrows a writer's failure. Costs nothing while no save is in flight.
  void progress();
  // Collective: waits until the last save is committed (or failed, which throws).
  void finish();

  // Allocates the host image a background save copies `state` into, at start-up rather than in
  // the first save; nothing for a synchronous checkpointer.
  void reserve(TrainState& state);

  bool async() const { return async_; }
  // Seconds the calls above kept the training thread waiting, since construction.
  double stall_seconds() const { return stall_s_; }

 private:
  enum class Phase { kIdle, kWriting, kWritten, kCommitting, kFailed };
  struct Job {
    int64_t step = 0;
    nlohmann::json metadata;
    std::vector<NamedTensor> source;  // the state's views; empty once the image holds them
    bool placed = false;              // every rank writes its part; rank 0 commits
  };

  Phase phase();
  void run_writer();
  template <typename Data>
  void write(const Job& job, const Data& data);
  void wait_until_written_everywhere();
  void rethrow_failure();

  std::filesystem::path dir_;
  int keep_last_;
  bool async_;
  comm::Communicator& world_;
  int rank_, ranks_;  // the writer thread must not ask the communicator
  double stall_s_ = 0;
  bool in_flight_ = false;  // a save that every rank started and that has not been committed

  ckpt::DataImage image_;  // the writer's copy of the state

  std::mutex mutex_;
  std::condition_variable changed_;
  Phase phase_ = Phase::kIdle;
  bool commit_ = false, stop_ = false;
  Job job_;
  std::exception_ptr failure_;
  std::thread writer_;
};

}  // namespace tessera::train
