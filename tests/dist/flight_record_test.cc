#include "tessera/comm/flight_record.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/flight_recorder.h"
#include "tessera/comm/stall_report.h"
#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

using testing::expect_error;

comm::FlightOp all_reduce(int64_t seq) {
  return {.op = "all_reduce",
          .dtype = "f32",
          .communicator = 1,
          .seq = seq,
          .count = 256,
          .bytes = 1024,
          .start_us = 1000 * seq};
}

std::vector<int64_t> seqs(const comm::FlightRing& ring) {
  std::vector<comm::FlightOp> ops;
  ring.copy_oldest_first(ops);
  std::vector<int64_t> out;
  for (const comm::FlightOp& op : ops) out.push_back(op.seq);
  return out;
}

TEST(FlightRing, KeepsTheNewestOperationsOldestFirst) {
  comm::FlightRing ring(3);
  EXPECT_TRUE(seqs(ring).empty());
  ring.push(all_reduce(1));
  ring.push(all_reduce(2));
  EXPECT_EQ(seqs(ring), (std::vector<int64_t>{1, 2}));
  for (int64_t seq = 3; seq <= 5; ++seq) ring.push(all_reduce(seq));
  EXPECT_EQ(seqs(ring), (std::vector<int64_t>{3, 4, 5}));
}

TEST(FlightRing, CompletingAnOverwrittenOperationLeavesItsSuccessorPending) {
  comm::FlightRing ring(2);
  const int64_t first = ring.push(all_reduce(1));
  const int64_t second = ring.push(all_reduce(2));
  ring.push(all_reduce(3));  // takes the first one's place
  ring.complete(first, 77);
  ring.complete(second, 88);
  std::vector<comm::FlightOp> ops;
  ring.copy_oldest_first(ops);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].seq, 2);
  EXPECT_EQ(ops[0].end_us, 88);
  EXPECT_EQ(ops[1].seq, 3);
  EXPECT_TRUE(ops[1].pending());
}

TEST(FlightRing, NeedsRoom) {
  expect_error([] { comm::FlightRing ring(0); }, {"at least one"});
}

comm::RankRecord record_of(int rank, int world_size) {
  comm::RankRecord r;
  r.rank = rank;
  r.world_size = world_size;
  r.job = 1234567890123;
  r.pid = 4000 + rank;
  r.host = "node-" + std::to_string(rank);
  r.wall_ms = 50'000;
  r.heartbeat = 9;
  std::vector<int> everyone;
  for (int i = 0; i < world_size; ++i) everyone.push_back(i);
  r.communicators = {{.name = "world", .ranks = everyone}, {.name = "dp", .ranks = everyone}};
  return r;
}

// Gives `r` dp collectives #1..#started, the last pending unless it completed as many.
void on_dp(comm::RankRecord& r, int64_t started, int64_t completed) {
  comm::FlightCommunicator& dp = r.communicators[1];
  dp.collectives_started = started;
  dp.collectives_completed = completed;
  r.operations.clear();
  for (int64_t seq = 1; seq <= started; ++seq) {
    comm::FlightOp op = all_reduce(seq);
    if (seq <= completed) op.end_us = op.start_us + 10;
    r.operations.push_back(op);
  }
}

TEST(FlightRecord, JsonRoundTrips) {
  comm::RankRecord r = record_of(1, 2);
  on_dp(r, 3, 2);
  r.communicators[0].messages_started = 1;
  r.operations.push_back({.op = "send",
                          .dtype = "bf16",
                          .communicator = 0,
                          .peer = 0,
                          .tag = 7,
                          .seq = 1,
                          .count = 4,
                          .bytes = 8,
                          .start_us = 5,
                          .end_us = 6});
  const std::string json = comm::record_json(r);
  EXPECT_EQ(comm::parse_record(json, "rank-1.json"), r) << json;
}

TEST(FlightRecord, ParseErrorsNameTheFileAndTheField) {
  comm::RankRecord r = record_of(1, 2);
  on_dp(r, 2, 1);
  std::string json = comm::record_json(r);
  const auto without = [](std::string text, const std::string& part, const std::string& with) {
    const size_t at = text.find(part);
    EXPECT_NE(at, std::string::npos) << part;
    return text.replace(at, part.size(), with);
  };
  expect_error([&] { comm::parse_record(without(json, "\"host\"", "\"hast\""), "rank-1.json"); },
               {"rank-1.json", "missing field 'host'"});
  expect_error(
      [&] { comm::parse_record(without(json, "\"seq\": 2", "\"seq\": \"2\""), "rank-1.json"); },
      {"rank-1.json", "operations[1].seq", "integer"});
  expect_error(
      [&] {
        comm::parse_record(without(json, "\"communicator\": 1", "\"communicator\": 5"), "r.json");
      },
      {"r.json", "operations[0].communicator", "2 communicators"});
  expect_error([&] { comm::parse_record(without(json, "\"rank\": 1", "\"rank\": 2"), "r.json"); },
               {"r.json", "'rank'", "outside the world of 2 ranks"});
  expect_error([&] { comm::parse_record(json.substr(0, json.size() / 2), "r.json"); },
               {"r.json", "does not parse"});
}

// Rank 0 of 3 timed out in dp's all_reduce #57.
struct StallCase {
  comm::RankRecord self = record_of(0, 3);
  std::vector<std::optional<comm::RankRecord>> records{std::nullopt, record_of(1, 3),
                                                       record_of(2, 3)};
  comm::Stall stall{.what = "all_reduce #57 of 256 f32 elements on dp (3 ranks)",
                    .communicator = 1,
                    .seq = 57,
                    .timeout_s = 3};

  StallCase() {
    on_dp(self, 57, 56);
    on_dp(*records[1], 57, 56);
    on_dp(*records[2], 57, 56);
  }
  std::optional<std::string> message() const {
    return comm::stall_message(stall, self, records, self.wall_ms, "/run/flight");
  }
};

TEST(StallMessage, NamesTheRankThatStoppedWritingItsRecord) {
  StallCase c;
  on_dp(*c.records[1], 56, 56);  // behind, but still responding: the stopped rank comes first
  c.records[2]->wall_ms -= 4000;
  on_dp(*c.records[2], 57, 56);
  EXPECT_EQ(c.message(),
            "all_reduce #57 of 256 f32 elements on dp (3 ranks) did not complete within 3 s: "
            "rank 2 (pid 4002 on host node-2) stopped responding 4 s ago, when it last wrote its "
            "record it had completed operation #56 on dp and was inside all_reduce #57 on dp; "
            "flight records in /run/flight");
}

TEST(StallMessage, WhenAllRespondNamesTheRanksThatHaveNotReachedTheOperation) {
  StallCase c;
  on_dp(*c.records[1], 55, 55);
  const std::optional<std::string> message = c.message();
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find(": rank 1 (pid 4001 on host node-1) is responding but has not started "
                          "it, its last completed operation on dp is #55; flight records in"),
            std::string::npos)
      << *message;
  EXPECT_EQ(message->find("rank 2"), std::string::npos) << *message;
}

TEST(StallMessage, SaysWhenEveryRankHasStartedTheOperation) {
  StallCase c;
  const std::optional<std::string> message = c.message();
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("every other rank of dp has started it and is still responding"),
            std::string::npos)
      << *message;
}

TEST(StallMessage, NamesThePeerOfAMessage) {
  StallCase c;
  c.stall = {.what = "recv #1 of 4 f32 elements from rank 2 (tag 7) on dp (3 ranks)",
             .communicator = 1,
             .seq = 1,
             .peer = 2,
             .timeout_s = 3};
  const std::optional<std::string> message = c.message();
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("rank 2 (pid 4002 on host node-2) is responding, it last completed "
                          "all_reduce #56 on dp, and it is inside all_reduce #57 on dp"),
            std::string::npos)
      << *message;
}

TEST(StallMessage, RecordsOfAnotherJobDoNotCount) {
  StallCase c;
  c.records[1]->job = 1;
  c.records[2].reset();
  EXPECT_EQ(c.message(), std::nullopt);
  c.records[2] = record_of(2, 3);
  on_dp(*c.records[2], 57, 56);
  const std::optional<std::string> message = c.message();
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("rank 1 left no flight record of this job"), std::string::npos)
      << *message;
}

// Rank 0 of 3 was stopped by the launcher: ranks on its host are looked up by pid, ranks on
// other hosts by the age of their records.
TEST(ExitedRanks, NamesTheProcessesGoneFromThisHostAndTheSilentRanksElsewhere) {
  StallCase c;
  c.records[1]->host = c.self.host;
  const auto alive_but = [](int64_t dead) { return [dead](int64_t pid) { return pid != dead; }; };
  const auto message = [&](int64_t dead) {
    return comm::exited_ranks_message(c.self, c.records, c.self.wall_ms, alive_but(dead));
  };
  EXPECT_EQ(message(-1), std::nullopt);
  EXPECT_EQ(message(4001),
            "rank 1 (pid 4001 on host node-0) has exited, when it last wrote its record it had "
            "last completed all_reduce #56 on dp and was inside all_reduce #57 on dp");
  c.records[2]->wall_ms -= 3000;
  const std::optional<std::string> both = message(4001);
  ASSERT_TRUE(both.has_value());
  EXPECT_NE(both->find("; rank 2 (pid 4002 on host node-2) stopped responding 3 s ago"),
            std::string::npos)
      << *both;
  c.records[1]->job = 1;  // another job's record says nothing of this one
  EXPECT_EQ(message(4001)->find("rank 1"), std::string::npos);
}

TEST(FlightRecorder, NumbersCollectivesAndMessagesApartWithoutAllocating) {
  comm::FlightRecorder& recorder = comm::FlightRecorder::instance();
  const int32_t c = recorder.add_communicator("flight-test", {0});
  const comm::FlightOp op{
      .op = "all_reduce", .dtype = "f32", .communicator = c, .count = 1, .bytes = 4};
  const int64_t before = testing::allocations.load();
  const comm::FlightTicket first = recorder.begin(op, /*collective=*/true);
  const comm::FlightTicket message = recorder.begin(op, /*collective=*/false);
  recorder.end(first);
  const comm::FlightTicket second = recorder.begin(op, /*collective=*/true);
  recorder.end(second);
  recorder.end(message);
  EXPECT_EQ(testing::allocations.load(), before);
  EXPECT_EQ(first.seq, 1);
  EXPECT_EQ(message.seq, 1);
  EXPECT_EQ(second.seq, 2);
}

}  // namespace
}  // namespace tessera::dist
