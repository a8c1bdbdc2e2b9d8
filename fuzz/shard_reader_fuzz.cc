// Token shards are outside input: any bytes must give a valid view or a tessera::Error.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tessera::data::ShardView view = tessera::data::parse_shard({data, size}, "fuzz");
    std::vector<int32_t> tokens(view.size());
    view.copy(0, view.size(), tokens.data());
    for (int32_t t : tokens) {
      if (t < 0 || t >= view.vocab_size()) std::abort();  // the reader promised every id fits
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
