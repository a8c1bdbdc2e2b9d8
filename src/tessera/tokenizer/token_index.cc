#include "tessera/tokenizer/token_index.h"

#include <cstring>
#include <functional>

namespace tessera::tokenizer {
namespace {

uint64_t hash_of(std::string_view bytes) { return std::hash<std::string_view>{}(bytes); }

}  // namespace

// The slot holding `bytes`, or the empty slot where it would go.
size_t TokenIndex::slot_of(std::string_view bytes, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  const uint32_t tag = uint32_t(hash >> 32);
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return i;
    if (slot.tag == tag && slot.length == bytes.size() &&
        std::memcmp(keys_.data() + slot.offset, bytes.data(), bytes.size()) == 0) {
      return i;
    }
  }
}

bool TokenIndex::insert(std::string_view bytes, int32_t id) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t hash = hash_of(bytes);
  Slot& slot = slots_[slot_of(bytes, hash)];
  if (slot.id >= 0) return false;
  slot = {uint32_t(hash >> 32), id, uint32_t(keys_.size()), uint32_t(bytes.size())};
  keys_.append(bytes);
  ++size_;
  return true;
}

int32_t TokenIndex::find(std::string_view bytes) const {
  return slots_[slot_of(bytes, hash_of(bytes))].id;
}

void TokenIndex::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    const std::string_view key(keys_.data() + slot.offset, slot.length);
    slots_[slot_of(key, hash_of(key))] = slot;
  }
}

}  // namespace tessera::tokenizer
