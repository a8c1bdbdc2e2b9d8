#include "tessera/comm/stall_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace tessera::comm {
namespace {

// A job of thousands of ranks losing a node should not print thousands of lines.
constexpr size_t kMostRanksNamed = 4;

// The communicator of `record` that is `c`: the same name and the same members, the latest made
// should a process have made several alike.
const FlightCommunicator* same_communicator(const RankRecord& record, const FlightCommunicator& c) {
  for (auto mine = record.communicators.rbegin(); mine != record.communicators.rend(); ++mine) {
    if (mine->name == c.name && mine->ranks == c.ranks) return &*mine;
  }
  return nullptr;
}

// "all_reduce #56 on dp"
std::string brief(const RankRecord& record, const FlightOp& op) {
  return fmt::format("{} #{} on {}", op.op, op.seq, record.communicators[op.communicator].name);
}

// "rank 1 (pid 4242 on host h) <state>, its last completed operation on dp is #56, and it is
// inside barrier #3 on world". `on` is the stalled communicator as this rank knows it, if it is
// one of its ranks. A `stale` record tells where the rank was when it wrote it, which may be well
// before it stopped: "..., when it last wrote its record it had completed operation #56 on dp and
// was inside barrier #3 on world".
std::string rank_state(const RankRecord& record, const std::string& state,
                       const FlightCommunicator* on, bool stale) {
  std::string text =
      fmt::format("rank {} (pid {} on host {}) {}, ", record.rank, record.pid, record.host, state);
  if (stale) text += "when it last wrote its record ";
  const char* has = stale ? "it had" : "it has";
  if (on != nullptr) {
    if (on->collectives_completed == 0) {
      text += fmt::format("{} completed no operation on {}", has, on->name);
    } else if (stale) {
      text +=
          fmt::format("it had completed operation #{} on {}", on->collectives_completed, on->name);
    } else {
      text += fmt::format("its last completed operation on {} is #{}", on->name,
                          on->collectives_completed);
    }
  } else {
    const FlightOp* last = nullptr;
    for (const FlightOp& op : record.operations) {
      if (!op.pending() && (last == nullptr || op.end_us >= last->end_us)) last = &op;
    }
    if (last == nullptr) {
      text += fmt::format("{} completed no operation", has);
    } else {
      text += fmt::format("{} last completed {}", stale ? "it had" : "it", brief(record, *last));
    }
  }
  const auto inside = std::find_if(record.operations.begin(), record.operations.end(),
                                   [](const FlightOp& op) { return op.pending(); });
  if (inside != record.operations.end()) {
    text += (stale ? " and was inside " : ", and it is inside ") + brief(record, *inside);
  }
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// `records[rank]` when it is that rank's record of this job.
const RankRecord* of_job(const RankRecord& self, std::span<const std::optional<RankRecord>> records,
                         int rank) {
  if (rank < 0 || size_t(rank) >= records.size()) return nullptr;
  const std::optional<RankRecord>& record = records[rank];
  if (!record || record->job != self.job || record->rank != rank) return nullptr;
  return &*record;
}

}  // namespace

std::optional<std::string> exited_ranks_message(
    const RankRecord& self, std::span<const std::optional<RankRecord>> records, int64_t now_ms,
    const std::function<bool(int64_t pid)>& process_exists) {
  std::vector<std::string> gone;
  for (int rank = 0; rank < int(records.size()); ++rank) {
    const RankRecord* record = rank == self.rank ? nullptr : of_job(self, records, rank);
    if (record == nullptr) continue;
    const int64_t age_ms = now_ms - record->wall_ms;
    std::string state;
    if (record->host == self.host) {
      if (process_exists(record->pid)) continue;
      state = "has exited";
    } else if (age_ms > kStaleRecordMs) {
      state = fmt::format("stopped responding {:.0f} s ago", age_ms / 1000.0);
    } else {
      continue;
    }
    if (gone.size() < kMostRanksNamed) {
      gone.push_back(rank_state(*record, state, nullptr, /*stale=*/true));
    } else if (gone.size() == kMostRanksNamed) {
      gone.push_back("and more");
    }
  }
  if (gone.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(gone, "; "));
}

std::optional<std::string> stall_message(const Stall& stall, const RankRecord& self,
                                         std::span<const std::optional<RankRecord>> records,
                                         int64_t now_ms, const std::string& dir) {
  const FlightCommunicator& on = self.communicators.at(stall.communicator);
  const auto readable = [&](int rank) { return of_job(self, records, rank); };
  const auto known_on = [&](const RankRecord& record) -> const FlightCommunicator* {
    return std::count(on.ranks.begin(), on.ranks.end(), record.rank) > 0
               ? same_communicator(record, on)
               : nullptr;
  };

  bool any_read = false;
  std::vector<std::string> holding;  // the ranks that hold the operation up, described
  std::vector<int> stopped, unread;
  for (int rank = 0; rank < int(records.size()); ++rank) {
    if (rank == self.rank) continue;
    const RankRecord* record = readable(rank);
    if (record == nullptr) {
      unread.push_back(rank);
      continue;
    }
    any_read = true;
    const int64_t age_ms = now_ms - record->wall_ms;
    if (age_ms <= kStaleRecordMs) continue;
    stopped.push_back(rank);
    if (holding.size() < kMostRanksNamed) {
      const std::string state = fmt::format("stopped responding {:.0f} s ago", age_ms / 1000.0);
      holding.push_back(rank_state(*record, state, known_on(*record), /*stale=*/true));
    }
  }
  if (!any_read) return std::nullopt;
  if (stopped.size() > holding.size()) {
    holding.push_back(fmt::format("and {} more stopped ranks", stopped.size() - holding.size()));
  }

  // Every rank responds: look for those of the communicator that have not reached the operation.
  if (holding.empty()) {
    std::vector<int> involved;
    if (stall.peer >= 0) {
      involved.push_back(on.ranks.at(stall.peer));
    } else {
      std::copy_if(on.ranks.begin(), on.ranks.end(), std::back_inserter(involved),
                   [&](int rank) { return rank != self.rank; });
    }
    int64_t lowest = stall.seq;
    std::vector<const RankRecord*> behind;
    for (int rank : involved) {
      const RankRecord* record = readable(rank);
      if (record == nullptr) continue;
      if (stall.peer >= 0) {
        holding.push_back(rank_state(*record, "is responding", nullptr, /*stale=*/false));
        continue;
      }
      const FlightCommunicator* theirs = same_communicator(*record, on);
      const int64_t started = theirs != nullptr ? theirs->collectives_started : 0;
      if (started < lowest) {
        lowest = started;
        behind.clear();
      }
      if (started == lowest && started < stall.seq) behind.push_back(record);
    }
    for (const RankRecord* record : behind) {
      if (holding.size() == kMostRanksNamed) break;
      holding.push_back(rank_state(*record, "is responding but has not started it",
                                   known_on(*record),
                                   /*stale=*/false));
    }
  }
  if (holding.empty()) {
    holding.push_back(unread.empty()
                          ? fmt::format("every other rank of {} has started it and is still "
                                        "responding",
                                        on.name)
                          : rank_list(unread) + " left no flight record of this job");
  }
  return fmt::format("{} did not complete within {:g} s: {}; flight records in {}", stall.what,
                     stall.timeout_s, fmt::join(holding, "; "), dir);
}

}  // namespace tessera::comm
