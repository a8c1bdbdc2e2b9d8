#include "tessera/train/goodput.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "tessera/core/atomic_file.h"

namespace tessera::train {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

nlohmann::json GoodputAccount::to_json() const {
  return {{"first_start", first_start}, {"wall_s", wall_s},     {"step_s", step_s},
          {"stall_s", stall_s},         {"eval_s", eval_s},     {"recomputed_s", recomputed_s},
          {"lost_s", lost_s()},         {"goodput", goodput()}, {"attempts", attempts},
          {"rollbacks", rollbacks}};
}

GoodputAccount GoodputAccount::from_json(const nlohmann::json& j) {
  GoodputAccount a;
  a.first_start = j.value("first_start", 0.0);
  a.wall_s = j.value("wall_s", 0.0);
  a.step_s = j.value("step_s", 0.0);
  a.stall_s = j.value("stall_s", 0.0);
  a.eval_s = j.value("eval_s", 0.0);
  a.recomputed_s = j.value("recomputed_s", 0.0);
  a.attempts = j.value("attempts", int64_t{1});
  a.rollbacks = j.value("rollbacks", int64_t{0});
  return a;
}

Goodput::Goodput(const std::filesystem::path& file, const nlohmann::json& at_checkpoint)
    : file_(file) {
  account_.first_start = unix_now();
  std::ifstream in(file);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  // An unreadable account is not worth failing a run for: it starts over.
  const nlohmann::json before = nlohmann::json::parse(text.str(), nullptr, false);
  if (!before.is_object()) return;
  resume_from(GoodputAccount::from_json(before), at_checkpoint);
}

void Goodput::resume_from(const GoodputAccount& before, const nlohmann::json& at_checkpoint) {
  const GoodputAccount kept =
      at_checkpoint.is_object() ? GoodputAccount::from_json(at_checkpoint) : GoodputAccount{};
  account_ = kept;
  account_.first_start = before.first_start;
  account_.attempts = before.attempts + 1;
  account_.rollbacks = before.rollbacks;
  // What the previous attempt counted after the checkpoint, its recomputed time included, is
  // trained again by this one.
  account_.recomputed_s =
      before.recomputed_s + std::max(0.0, before.counted_s() - kept.counted_s());
}

void Goodput::rolled_back(const nlohmann::json& at_checkpoint) {
  GoodputAccount before = account();
  const int64_t attempts = before.attempts;
  resume_from(before, at_checkpoint);
  account_.attempts = attempts;
  ++account_.rollbacks;
}

GoodputAccount Goodput::account() const {
  GoodputAccount a = account_;
  a.wall_s = unix_now() - a.first_start;
  return a;
}

void Goodput::write() const { write_file_atomically(file_, account().to_json().dump(2) + "\n"); }

}  // namespace tessera::train
