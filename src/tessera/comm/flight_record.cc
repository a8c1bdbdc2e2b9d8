#include "tessera/comm/flight_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/json_reader.h"

namespace tessera::comm {
namespace {

using nlohmann::json;

// Names read back from files stay alive as long as the literals they stand for.
std::string_view intern(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> names;
  std::lock_guard lock(mutex);
  return *names.insert(text).first;
}

json op_json(const FlightOp& op, const std::vector<FlightCommunicator>& communicators) {
  const bool known = op.communicator >= 0 && size_t(op.communicator) < communicators.size();
  return {{"op", op.op},
          {"communicator", op.communicator},
          {"on", known ? communicators[op.communicator].name : "?"},
          {"seq", op.seq},
          {"count", op.count},
          {"dtype", op.dtype},
          {"bytes", op.bytes},
          {"peer", op.peer},
          {"tag", op.tag},
          {"start_us", op.start_us},
          {"end_us", op.pending() ? json(nullptr) : json(op.end_us)}};
}

// The fields of one object of a record, read with errors that name their path in the file.
class Fields {
 public:
  Fields(const JsonReader& in, const json& object, std::string path)
      : in_(in), object_(object), path_(std::move(path)) {
    if (!object.is_object()) in.wrong_type(object, path_.empty() ? "(top)" : path_, "an object");
  }

  std::string path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& get(const char* key) const { return in_.field(object_, key, path(key)); }
  int64_t int64(const char* key) const { return in_.int64(get(key), path(key)); }
  std::string string(const char* key) const { return in_.string(get(key), path(key)); }
  int32_t int32(const char* key) const { return narrow(get(key), path(key)); }
  // Element i of the array `key`.
  int32_t int32_at(const char* key, size_t i) const {
    return narrow(array(key)[i], fmt::format("{}[{}]", path(key), i));
  }
  const json& array(const char* key) const {
    const json& value = get(key);
    if (!value.is_array()) in_.wrong_type(value, path(key), "an array");
    return value;
  }

 private:
  int32_t narrow(const json& v, const std::string& at) const {
    const int64_t value = in_.int64(v, at);
    if (value < INT32_MIN || value > INT32_MAX) in_.bad(at, "is out of range");
    return static_cast<int32_t>(value);
  }

  const JsonReader& in_;
  const json& object_;
  std::string path_;
};

FlightCommunicator communicator_from(const Fields& c) {
  FlightCommunicator out;
  out.name = c.string("name");
  for (size_t i = 0; i < c.array("ranks").size(); ++i) out.ranks.push_back(c.int32_at("ranks", i));
  out.collectives_started = c.int64("collectives_started");
  out.collectives_completed = c.int64("collectives_completed");
  out.messages_started = c.int64("messages_started");
  return out;
}

FlightOp op_from(const Fields& o) {
  FlightOp op;
  op.op = intern(o.string("op"));
  op.communicator = o.int32("communicator");
  op.seq = o.int64("seq");
  op.count = o.int64("count");
  op.dtype = intern(o.string("dtype"));
  op.bytes = o.int64("bytes");
  op.peer = o.int32("peer");
  op.tag = o.int32("tag");
  op.start_us = o.int64("start_us");
  op.end_us = o.get("end_us").is_null() ? 0 : o.int64("end_us");
  return op;
}

}  // namespace

FlightRing::FlightRing(size_t capacity) : ops_(capacity) {
  check(capacity > 0, "a flight ring needs room for at least one operation");
}

int64_t FlightRing::push(const FlightOp& op) {
  ops_[next_ % int64_t(ops_.size())] = op;
  return next_++;
}

void FlightRing::complete(int64_t position, int64_t end_us) {
  if (position < next_ - int64_t(ops_.size()) || position >= next_) return;
  ops_[position % int64_t(ops_.size())].end_us = end_us;
}

void FlightRing::copy_oldest_first(std::vector<FlightOp>& out) const {
  out.clear();
  const int64_t capacity = int64_t(ops_.size());
  for (int64_t p = std::max<int64_t>(0, next_ - capacity); p < next_; ++p) {
    out.push_back(ops_[p % capacity]);
  }
}

std::string record_json(const RankRecord& record) {
  json communicators = json::array();
  for (const FlightCommunicator& c : record.communicators) {
    communicators.push_back({{"name", c.name},
                             {"ranks", c.ranks},
                             {"collectives_started", c.collectives_started},
                             {"collectives_completed", c.collectives_completed},
                             {"messages_started", c.messages_started}});
  }
  json operations = json::array();
  for (const FlightOp& op : record.operations) {
    operations.push_back(op_json(op, record.communicators));
  }
  const json out = {{"rank", record.rank},
                    {"world_size", record.world_size},
                    {"job", record.job},
                    {"pid", record.pid},
                    {"host", record.host},
                    {"wall_time_ms", record.wall_ms},
                    {"heartbeat", record.heartbeat},
                    {"communicators", std::move(communicators)},
                    {"operations", std::move(operations)}};
  return out.dump(1) + "\n";
}

RankRecord parse_record(std::string_view text, const std::string& source) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!root.is_discarded(), "{}: not a flight record (the JSON does not parse)", source);
  const JsonReader in(source);
  const Fields top(in, root, "");
  RankRecord record;
  record.rank = top.int32("rank");
  record.world_size = top.int32("world_size");
  record.job = top.int64("job");
  record.pid = top.int64("pid");
  record.host = top.string("host");
  record.wall_ms = top.int64("wall_time_ms");
  record.heartbeat = top.int64("heartbeat");
  if (record.rank < 0 || record.rank >= record.world_size) {
    in.bad("rank",
           fmt::format("is {}, outside the world of {} ranks", record.rank, record.world_size));
  }
  const json& communicators = top.array("communicators");
  for (size_t i = 0; i < communicators.size(); ++i) {
    record.communicators.push_back(
        communicator_from(Fields(in, communicators[i], fmt::format("communicators[{}]", i))));
  }
  const json& operations = top.array("operations");
  for (size_t i = 0; i < operations.size(); ++i) {
    const Fields fields(in, operations[i], fmt::format("operations[{}]", i));
    record.operations.push_back(op_from(fields));
    const int32_t c = record.operations.back().communicator;
    if (c < 0 || size_t(c) >= record.communicators.size()) {
      in.bad(fields.path("communicator"), fmt::format("is {}, but the record has {} communicators",
                                                      c, record.communicators.size()));
    }
  }
  return record;
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<RankRecord> read_record_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    return parse_record(text, path.string());
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace tessera::comm
