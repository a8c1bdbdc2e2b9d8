// A rank's flight record: its communicators and its most recent operations on them, kept so that
// a job that hangs can say which rank stopped and where. This file holds the record's types, the
// fixed ring the operations live in, and the record's JSON form, which each rank writes to
// <dir>/rank-<R>.json and the others read back.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::comm {

// How often a rank rewrites its record file while it runs.
inline constexpr std::chrono::milliseconds kHeartbeatPeriod{1000};

// One operation of a communicator.
struct FlightOp {
  // Both view string literals ("all_reduce", "bf16"), so that recording copies no text; records
  // read back from a file view interned copies instead.
  std::string_view op;
  std::string_view dtype;
  int32_t communicator = -1;  // index into the record's communicators
  // A send's destination, a recv's source or a broadcast's root, in the communicator; else -1.
  int32_t peer = -1;
  int32_t tag = 0;
  // 1 for the communicator's first collective; sends and receives are numbered apart from the
  // collectives, since ranks send different numbers of messages.
  int64_t seq = 0;
  int64_t count = 0;     // elements, as the call counts them
  int64_t bytes = 0;     // what this rank sends or reduces
  int64_t start_us = 0;  // wall clock, microseconds since the epoch
  int64_t end_us = 0;    // 0 while the operation is pending

  bool pending() const { return end_us == 0; }
  bool operator==(const FlightOp&) const = default;
};

// A communicator as its rank's record knows it.
struct FlightCommunicator {
  std::string name;                   // "world", "dp", "tp", ...
  std::vector<int> ranks;             // the world rank of each of its ranks, in its rank order
  int64_t collectives_started = 0;    // so also the last collective's seq
  int64_t collectives_completed = 0;  // the highest seq completed
  int64_t messages_started = 0;       // sends and receives

  bool operator==(const FlightCommunicator&) const = default;
};

// The most recent operations, in a buffer allocated once.
class FlightRing {
 public:
  explicit FlightRing(size_t capacity);

  // Appends `op`, overwriting the oldest once full, and returns its position for complete().
  int64_t push(const FlightOp& op);
  // Sets the end time of the operation at `position`, unless it has been overwritten since.
  void complete(int64_t position, int64_t end_us);
  // Replaces `out` with the operations held, oldest first.
  void copy_oldest_first(std::vector<FlightOp>& out) const;

 private:
  std::vector<FlightOp> ops_;
  int64_t next_ = 0;  // the position of the next push
};

// Everything a rank's record file holds.
struct RankRecord {
  int rank = 0;
  int world_size = 0;
  // The same on every rank of one job, so that a file left by an earlier run in the same
  // directory is not taken for this one's.
  int64_t job = 0;
  int64_t pid = 0;
  std::string host;
  int64_t wall_ms = 0;    // when the record was written, milliseconds since the epoch
  int64_t heartbeat = 0;  // how many times the rank has written it
  std::vector<FlightCommunicator> communicators;
  std::vector<FlightOp> operations;  // oldest first

  bool operator==(const RankRecord&) const = default;
};

std::string record_json(const RankRecord& record);
// Throws an Error naming `source` and the field at fault.
RankRecord parse_record(std::string_view json, const std::string& source);
// The record in `path`, or nullopt when the file is missing or does not hold one (a rank may be
// rewriting it, or have died halfway through its first write).
std::optional<RankRecord> read_record_file(const std::filesystem::path& path);

// Microseconds since the epoch, the clock of every time in a record.
int64_t wall_clock_us();

}  // namespace tessera::comm
