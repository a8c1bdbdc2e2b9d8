#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

// Token bytes -> id, for the lookup every pre-token makes while encoding. Open addressing over
// one flat slot array with the keys packed in one string: std::unordered_map's chase through
// scattered nodes cost more than all the rest of encoding together.
class TokenIndex {
 public:
  // Returns false (and adds nothing) if `bytes` is already present.
  bool insert(std::string_view bytes, int32_t id);
  // -1 when absent.
  int32_t find(std::string_view bytes) const;

 private:
  struct Slot {
    uint32_t tag = 0;  // high bits of the hash, to skip most key comparisons
    int32_t id = -1;   // -1 marks an empty slot
    uint32_t offset = 0;
    uint32_t length = 0;
  };

  size_t slot_of(std::string_view bytes, uint64_t hash) const;
  void grow();

  std::vector<Slot> slots_ = std::vector<Slot>(16);
  std::string keys_;
  size_t size_ = 0;
};

}  // namespace tessera::tokenizer
