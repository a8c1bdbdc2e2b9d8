// The process's flight recorder. Every MPI communicator records each operation it starts and
// completes in one fixed ring (the last kFlightOps operations of the rank), always. Once
// start_flight_recorder has named a directory, a background thread rewrites this rank's record
// there every heartbeat, and a rank whose operation times out writes its record one last time,
// reads the others' and ends the job naming the ranks that hold it up (stall_report.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/flight_record.h"
#include "tessera/comm/stall_report.h"

namespace tessera::comm {

inline constexpr size_t kFlightOps = 256;

// Makes every rank write its flight record to <dir>/rank-<R>.json, atomically, about once a
// second, and a timeout's message name the stuck ranks from those files; the ranks must share
// `dir` (the run's output folder on a shared filesystem). Creates `dir`. Collective over the
// world; does nothing in a single-rank job, which cannot hang waiting for another rank.
void start_flight_recorder(const std::filesystem::path& dir);

// Where a recorded operation sits, to complete it.
struct FlightTicket {
  int64_t position = -1;
  int32_t communicator = -1;
  int64_t seq = 0;
  bool collective = false;
};

class FlightRecorder {
 public:
  // Never destroyed: the heartbeat thread and the watchdog may use it while statics go.
  static FlightRecorder& instance();

  // Returns the communicator's index in the record. `ranks` are its members' world ranks.
  int32_t add_communicator(std::string name, std::vector<int> ranks);

  // These bracket every operation, so they allocate nothing. begin numbers `op` and stamps its
  // start; `op.communicator` must come from add_communicator.
  FlightTicket begin(FlightOp op, bool collective);
  void end(const FlightTicket& ticket);

  // Called once the world is up (start_flight_recorder): writes the first record and starts
  // the heartbeat.
  void start(const std::filesystem::path& dir, int rank, int world_size, int64_t job);

  // The message for a timed-out operation of this rank, after writing its record a last time;
  // nullopt when no directory is set or no other rank's record could be read.
  std::optional<std::string> stall_message(const Stall& stall);
  // The other ranks of the job that have exited or stopped responding (exited_ranks_message);
  // nullopt when none has, or no directory is set.
  std::optional<std::string> exited_ranks_message();

 private:
  FlightRecorder();
  [[noreturn]] void beat();
  // Fills `record` with this rank's state now.
  void snapshot(RankRecord& record);
  // Stamps `record` and writes it atomically, so that a reader sees the previous file or this
  // one, never half of one. The caller holds write_mutex_.
  void write(RankRecord& record);
  std::optional<RankRecord> read(int rank) const;

  // Guards what the communicators change: the ring and the communicators' counts.
  std::mutex mutex_;
  FlightRing ring_;
  std::vector<FlightCommunicator> communicators_;

  // Guards the files and what describes them; taken before mutex_ when both are.
  std::mutex write_mutex_;
  std::filesystem::path dir_;  // empty until start
  RankRecord heartbeat_record_;
  bool write_failed_ = false;
};

}  // namespace tessera::comm
