#include "tessera/comm/flight_recorder.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <system_error>
#include <thread>

#include "tessera/comm/world.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "?";
  return name.data();
}

std::filesystem::path record_path(const std::filesystem::path& dir, int rank) {
  return dir / fmt::format("rank-{}.json", rank);
}

}  // namespace

void start_flight_recorder(const std::filesystem::path& dir) {
  Communicator& w = world();
  if (w.size() <= 1) return;
  // The job's id is rank 0's start time in microseconds, which no earlier run in the same folder
  // shares; a double holds it exactly.
  double job = w.rank() == 0 ? double(wall_clock_us()) : 0;
  w.all_reduce(&job, 1);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "{}: cannot create the flight record directory: {}", dir.string(), ec.message());
  FlightRecorder::instance().start(dir, w.rank(), w.size(), int64_t(job));
}

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder* const recorder = new FlightRecorder;
  return *recorder;
}

FlightRecorder::FlightRecorder() : ring_(kFlightOps) {}

int32_t FlightRecorder::add_communicator(std::string name, std::vector<int> ranks) {
  std::lock_guard lock(mutex_);
  communicators_.push_back({.name = std::move(name), .ranks = std::move(ranks)});
  return int32_t(communicators_.size() - 1);
}

FlightTicket FlightRecorder::begin(FlightOp op, bool collective) {
  op.start_us = wall_clock_us();
  op.end_us = 0;
  std::lock_guard lock(mutex_);
  FlightCommunicator& c = communicators_[op.communicator];
  op.seq = collective ? ++c.collectives_started : ++c.messages_started;
  return {ring_.push(op), op.communicator, op.seq, collective};
}

void FlightRecorder::end(const FlightTicket& ticket) {
  const int64_t now = wall_clock_us();
  std::lock_guard lock(mutex_);
  ring_.complete(ticket.position, now);
  if (ticket.collective) {
    int64_t& completed = communicators_[ticket.communicator].collectives_completed;
    completed = std::max(completed, ticket.seq);
  }
}

void FlightRecorder::start(const std::filesystem::path& dir, int rank, int world_size,
                           int64_t job) {
  std::lock_guard lock(write_mutex_);
  check(dir_.empty(), "the flight recorder already writes to {}; start it once per process",
        dir_.string());
  dir_ = dir;
  RankRecord& record = heartbeat_record_;
  record.rank = rank;
  record.world_size = world_size;
  record.job = job;
  record.pid = getpid();
  record.host = host_name();
  snapshot(record);
  write(record);
  std::thread([this] { beat(); }).detach();
}

void FlightRecorder::beat() {
  while (true) {
    std::this_thread::sleep_for(kHeartbeatPeriod);
    std::lock_guard lock(write_mutex_);
    snapshot(heartbeat_record_);
    write(heartbeat_record_);
  }
}

void FlightRecorder::snapshot(RankRecord& record) {
  std::lock_guard lock(mutex_);
  record.communicators = communicators_;
  ring_.copy_oldest_first(record.operations);
}

void FlightRecorder::write(RankRecord& record) {
  record.wall_ms = wall_clock_us() / 1000;
  ++record.heartbeat;
  try {
    write_file_atomically(record_path(dir_, record.rank), record_json(record));
  } catch (const Error& e) {
    // A full or vanished disk must not end a run that is otherwise fine; say so once.
    if (!write_failed_) spdlog::warn("flight record not written: {}", e.what());
    write_failed_ = true;
  }
}

std::optional<RankRecord> FlightRecorder::read(int rank) const {
  return read_record_file(record_path(dir_, rank));
}

std::optional<std::string> FlightRecorder::stall_message(const Stall& stall) {
  std::lock_guard lock(write_mutex_);
  if (dir_.empty()) return std::nullopt;
  try {
    RankRecord& self = heartbeat_record_;
    snapshot(self);
    write(self);
    std::vector<std::optional<RankRecord>> records(self.world_size);
    for (int rank = 0; rank < self.world_size; ++rank) {
      if (rank != self.rank) records[rank] = read(rank);
    }
    return comm::stall_message(stall, self, records, wall_clock_us() / 1000, dir_.string());
  } catch (const std::exception&) {
    // The caller falls back to a message without the other ranks.
    return std::nullopt;
  }
}

std::optional<std::string> FlightRecorder::exited_ranks_message() {
  std::lock_guard lock(write_mutex_);
  if (dir_.empty()) return std::nullopt;
  try {
    const RankRecord& self = heartbeat_record_;
    std::vector<std::optional<RankRecord>> records(self.world_size);
    for (int rank = 0; rank < self.world_size; ++rank) {
      if (rank != self.rank) records[rank] = read(rank);
    }
    // kill with no signal checks that the process exists; EPERM means it does, as another user's.
    const auto exists = [](int64_t pid) { return kill(pid_t(pid), 0) == 0 || errno == EPERM; };
    return comm::exited_ranks_message(self, records, wall_clock_us() / 1000, exists);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace tessera::comm
