#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tessera/model/adapter_bank.h"

namespace tessera::serve {

// A request's hold on one served adapter: the slot it runs in, and a key no other load of that
// slot shares, which keeps the prefix cache's blocks of one adapter from another's. While a lease
// lives, the adapter stays in its slot.
struct AdapterLease {
  int32_t slot = -1;
  uint64_t key = 0;
};

// The LoRA adapters a server holds by name in the slots of an AdapterBank: loaded at start
// (serve --lora) or while serving (/v1/load_lora_adapter), and unloaded while serving. Memory is
// bounded by the slots and their highest rank. An adapter unloaded while requests still run with
// it leaves its slot when the last of them ends; new requests no longer find it. Thread-safe.
// Over several ranks, each rank loads the same adapters in the same order, into the same slots.
class ServedAdapters {
 public:
  // sharding: this rank's tensor-parallel slice of the model (AdapterBank).
  ServedAdapters(const model::ModelConfig& base, int64_t slots, int64_t max_rank,
                 int64_t max_tokens, const model::Sharding& sharding = {});
  ServedAdapters(const ServedAdapters&) = delete;
  ServedAdapters& operator=(const ServedAdapters&) = delete;

  // What the model reads the adapters from.
  model::AdapterBank& bank() { return bank_; }

  // Reads the adapter at `path` (a PEFT adapter folder, or a LoRA run of Tessera's, its folder or
  // a step, trained on the served model) into a free slot under `name`. Throws naming the
  // problem: a bad name, a name taken, no free slot, another model's adapter, a rank above the
  // bank's.
  void load(const std::string& name, const std::filesystem::path& path);
  // The same with the adapter's settings and values (the range [adapters_begin, total) of its
  // model_layout).
  void load(const std::string& name, const model::ModelConfig& adapted,
            std::span<const float> values);
  // Takes the adapter out of the names served. Returns false when no adapter has that name.
  bool unload(const std::string& name);

  // The adapter named `name` for one request; null when none has that name.
  std::shared_ptr<const AdapterLease> lease(const std::string& name);
  // Whether an adapter of that name is served.
  bool serves(const std::string& name) const;
  // The adapters served, in slot order.
  std::vector<std::string> names() const;
  int64_t slots() const { return int64_t(slots_.size()); }

 private:
  enum class State { kFree, kLoading, kServed, kDraining };
  struct Slot {
    State state = State::kFree;
    std::string name;  // while loading or served
    uint64_t key = 0;
    int64_t leases = 0;
  };
  // Throws unless `name` is a valid adapter name that no slot holds; under mutex_.
  void check_name(const std::string& name) const;
  // The slot serving `name`, or -1; under mutex_.
  int32_t served_slot(const std::string& name) const;
  void release(int32_t slot);

  const model::ModelConfig base_;
  model::AdapterBank bank_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  uint64_t next_key_ = 1;
};

}  // namespace tessera::serve
