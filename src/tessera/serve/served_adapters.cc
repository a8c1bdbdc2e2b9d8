#include "tessera/serve/served_adapters.h"

#include <algorithm>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/interop/peft_adapter.h"

namespace tessera::serve {

namespace fs = std::filesystem;

ServedAdapters::ServedAdapters(const model::ModelConfig& base, int64_t slots, int64_t max_rank,
                               int64_t max_tokens, const model::Sharding& sharding)
    : base_(base), bank_(base, slots, max_rank, max_tokens, sharding), slots_(size_t(slots)) {}

void ServedAdapters::check_name(const std::string& name) const {
  check(
      !name.empty() && name.size() <= 128 && name.find_first_of(" \t\r\n\"':") == std::string::npos,
      "'{}': an adapter's name is 1 to 128 characters without spaces, quotes or colons", name);
  for (const Slot& s : slots_) {
    check(s.name != name, "an adapter named '{}' is already served", name);
  }
}

void ServedAdapters::load(const std::string& name, const model::ModelConfig& adapted,
                          std::span<const float> values) {
  int32_t slot = -1;
  {
    std::lock_guard lock(mutex_);
    check_name(name);
    const auto free = std::find_if(slots_.begin(), slots_.end(),
                                   [](const Slot& s) { return s.state == State::kFree; });
    check(free != slots_.end(),
          "adapter '{}': every one of the {} adapter slots is taken (--max-loras); unload one "
          "first",
          name, slots_.size());
    *free = {State::kLoading, name, 0, 0};
    slot = int32_t(free - slots_.begin());
  }
  try {
    bank_.load(slot, adapted, values);
  } catch (...) {
    std::lock_guard lock(mutex_);
    slots_[size_t(slot)] = {};
    throw;
  }
  std::lock_guard lock(mutex_);
  slots_[size_t(slot)].state = State::kServed;
  slots_[size_t(slot)].key = next_key_++;
}

void ServedAdapters::load(const std::string& name, const fs::path& path) {
  {
    std::lock_guard lock(mutex_);
    check_name(name);
  }
  // Each source's settings are checked against the bank before its values are read.
  try {
    const fs::path peft_config = path / interop::kPeftConfigFile;
    if (fs::exists(peft_config)) {
      bank_.check_fits(
          interop::peft_settings(read_json_file(peft_config, "the PEFT adapter config"), base_,
                                 peft_config.string())
              .config);
      const interop::PeftImport peft = interop::import_peft(path, base_);
      load(name, peft.config, peft.adapters);
      return;
    }
    const fs::path step_dir = ckpt::checkpoint_step_dir(path);
    const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
    const model::ModelConfig settings = ckpt::checkpoint_model_config(step_dir, manifest);
    check(settings.lora.enabled(), "{} holds no LoRA adapters (train.lora_rank = 0)",
          step_dir.string());
    bank_.check_fits(settings);
    const auto [adapted, params] = ckpt::read_checkpoint_params(step_dir, manifest);
    const int64_t begin = model::model_layout(adapted).adapters_begin;
    load(name, adapted, std::span<const float>(params).subspan(size_t(begin)));
  } catch (const std::exception& e) {
    fail("adapter '{}' from {}: {}", name, path.string(), e.what());
  }
}

int32_t ServedAdapters::served_slot(const std::string& name) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == State::kServed && slots_[i].name == name) return int32_t(i);
  }
  return -1;
}

bool ServedAdapters::unload(const std::string& name) {
  std::lock_guard lock(mutex_);
  const int32_t slot = served_slot(name);
  if (slot < 0) return false;
  Slot& s = slots_[size_t(slot)];
  s.name.clear();
  if (s.leases > 0) {
    s.state = State::kDraining;
  } else {
    bank_.unload(slot);
    s = {};
  }
  return true;
}

std::shared_ptr<const AdapterLease> ServedAdapters::lease(const std::string& name) {
  std::lock_guard lock(mutex_);
  const int32_t slot = served_slot(name);
  if (slot < 0) return nullptr;
  ++slots_[size_t(slot)].leases;
  return std::shared_ptr<const AdapterLease>(new AdapterLease{slot, slots_[size_t(slot)].key},
                                             [this](const AdapterLease* held) {
                                               release(held->slot);
                                               delete held;
                                             });
}

void ServedAdapters::release(int32_t slot) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_[size_t(slot)];
  if (--s.leases == 0 && s.state == State::kDraining) {
    bank_.unload(slot);
    s = {};
  }
}

bool ServedAdapters::serves(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return served_slot(name) >= 0;
}

std::vector<std::string> ServedAdapters::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> served;
  for (const Slot& s : slots_) {
    if (s.state == State::kServed) served.push_back(s.name);
  }
  return served;
}

}  // namespace tessera::serve
