#include "tessera/train/checkpointer.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/error.h"

namespace tessera::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kPollInterval{5};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Checkpointer::Checkpointer(const fs::path& checkpoint_dir, const CheckpointConfig& config,
                           comm::Communicator& world)
    : dir_(checkpoint_dir),
      keep_last_(int(config.keep_last)),
      async_(config.async),
      world_(world),
      rank_(world.rank()),
      ranks_(world.size()) {
  if (async_) writer_ = std::thread([this] { run_writer(); });
}

Checkpointer::~Checkpointer() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

void Checkpointer::save(int64_t step, TrainState& state, const nlohmann::json& metadata) {
  rethrow_failure();
  const auto t0 = Clock::now();
  if (in_flight_ || phase() == Phase::kCommitting) {
    spdlog::info("checkpoint step {} waits for the previous save to be committed", step);
    finish();
  }
  Job job;
  job.step = step;
  job.metadata = metadata;
  job.source = state.checkpoint_tensors();
  const nlohmann::json placed = state.checkpoint_layout();
  job.placed = !placed.is_null();
  if (job.placed) job.metadata["placed"] = placed;
  // A placed checkpoint has a part from every rank, in the directory rank 0 opens.
  if (job.placed) {
    if (rank_ == 0) ckpt::begin_save(dir_, step);
    world_.barrier();
  }
  if (!async_) {
    write(job, job.source);
    if (job.placed) {
      world_.barrier();
      if (rank_ == 0) ckpt::commit_save(dir_, step, ranks_, job.metadata, keep_last_);
      world_.barrier();
    }
    stall_s_ += seconds_since(t0);
    return;
  }
  // The snapshot is taken here, on every core: a copy in the writer thread would share the cores
  // with training and, delaying one thread of each parallel region, stall the whole step.
  const bool writes = job.placed || rank_ == 0;
  if (writes) image_.fill(job.source);
  job.source.clear();
  {
    std::lock_guard lock(mutex_);
    phase_ = writes ? Phase::kWriting : Phase::kWritten;
    commit_ = false;
    job_ = std::move(job);
  }
  changed_.notify_all();
  in_flight_ = true;
  stall_s_ += seconds_since(t0);
}

void Checkpointer::progress() {
  rethrow_failure();
  if (!in_flight_) return;
  const auto t0 = Clock::now();
  bool written = false;
  {
    std::lock_guard lock(mutex_);
    written = phase_ == Phase::kWritten || phase_ == Phase::kIdle;
  }
  double unwritten = written ? 0 : 1;
  if (ranks_ > 1) world_.all_reduce(&unwritten, 1);
  if (unwritten == 0) {
    in_flight_ = false;
    std::lock_guard lock(mutex_);
    if (phase_ == Phase::kWritten) {
      // Rank 0 of a placed save commits what every rank wrote; the others are done.
      const bool commits = rank_ == 0 && job_.placed;
      phase_ = commits ? Phase::kCommitting : Phase::kIdle;
      commit_ = commits;
    }
  }
  changed_.notify_all();
  stall_s_ += seconds_since(t0);
}

void Checkpointer::finish() {
  if (!async_) return;
  const auto t0 = Clock::now();
  while (in_flight_) {
    progress();
    if (in_flight_) std::this_thread::sleep_for(kPollInterval);
  }
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return phase_ == Phase::kIdle || phase_ == Phase::kFailed; });
  }
  rethrow_failure();
  // Rank 0 commits a placed save on its own: the others must not look for the step before.
  if (ranks_ > 1) world_.barrier();
  stall_s_ += seconds_since(t0);
}

Checkpointer::Phase Checkpointer::phase() {
  std::lock_guard lock(mutex_);
  return phase_;
}

void Checkpointer::rethrow_failure() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void Checkpointer::run_writer() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || phase_ == Phase::kWriting || commit_; });
    if (stop_) return;
    try {
      if (phase_ == Phase::kWriting) {
        lock.unlock();
        const auto t0 = Clock::now();
        write(job_, image_);
        lock.lock();
        // An unplaced save is rank 0's alone and write() committed it.
        phase_ = job_.placed ? Phase::kWritten : Phase::kIdle;
        if (!job_.placed) {
          spdlog::info("checkpoint step {} committed in {:.2f} s in the background", job_.step,
                       seconds_since(t0));
        }
      } else {
        commit_ = false;
        lock.unlock();
        const auto t0 = Clock::now();
        ckpt::commit_save(dir_, job_.step, ranks_, job_.metadata, keep_last_);
        spdlog::info("checkpoint step {} committed in {:.2f} s in the background", job_.step,
                     seconds_since(t0));
        lock.lock();
        phase_ = Phase::kIdle;
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      failure_ = std::current_exception();
      phase_ = Phase::kFailed;
    }
    changed_.notify_all();
  }
}

// This rank's part of a placed save, or (rank 0) the whole of an unplaced one, from the state's
// tensors or from the image of them.
template <typename Data>
void Checkpointer::write(const Job& job, const Data& data) {
  if (job.placed) {
    ckpt::write_part(ckpt::pending_step_dir(dir_, job.step), rank_, data);
  } else if (rank_ == 0) {
    ckpt::save(dir_, job.step, data, job.metadata, keep_last_);
  }
}

void Checkpointer::reserve(TrainState& state) {
  if (!async_) return;
  const std::vector<NamedTensor> tensors = state.checkpoint_tensors();
  if (tensors.empty()) return;
  image_.reserve(tensors);
  spdlog::info("checkpoint: {:.1f} MiB of host memory for saving in the background",
               double(image_.padded_bytes().size()) / (1 << 20));
}

}  // namespace tessera::train
