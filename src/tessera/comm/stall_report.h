// What a rank that timed out in an operation says about it, from the flight records of every rank
// of the job: which ranks hold the operation up (those that stopped writing their records, else
// those that have not reached it) and where each of them is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "tessera/comm/flight_record.h"

namespace tessera::comm {

// A rank counts as stopped when its record is older than this: two and a half heartbeats.
inline constexpr int64_t kStaleRecordMs = kHeartbeatPeriod.count() * 5 / 2;

// The operation a rank gave up waiting for.
struct Stall {
  std::string what;           // "all_reduce #57 of 1024 f32 elements on dp (2 ranks)"
  int32_t communicator = -1;  // index into the waiting rank's record
  int64_t seq = 0;
  int peer = -1;  // for a send or recv, the peer's rank in the communicator; else -1
  double timeout_s = 0;
};

// "<what> did not complete within <timeout> s: rank 1 (pid 4242 on host h) stopped responding
// 11 s ago, when it last wrote its record it had completed operation #56 on dp; flight records in
// <dir>", or nullopt when
// no other rank's record was read. `records[r]` is rank r's record as read back from its file
// (nullopt when unreadable); `self`, the waiting rank's own, is taken from `self` rather than from
// `records`. Records of another job count as unreadable. `now_ms` is the wall clock of the
// records.
std::optional<std::string> stall_message(const Stall& stall, const RankRecord& self,
                                         std::span<const std::optional<RankRecord>> records,
                                         int64_t now_ms, const std::string& dir);

// "rank 2 (pid 4242 on host h) has exited, when it last wrote its record it had last completed
// recv #9 on pp": the other ranks of the job that are gone, each a process of this host that no
// longer exists (`process_exists` says) or, on another host, a rank whose record is stale; nullopt
// when every rank whose record was read is there. What a rank says when the launcher stops it
// because another rank ended.
std::optional<std::string> exited_ranks_message(
    const RankRecord& self, std::span<const std::optional<RankRecord>> records, int64_t now_ms,
    const std::function<bool(int64_t pid)>& process_exists);

}  // namespace tessera::comm
