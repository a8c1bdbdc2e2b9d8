#include "tessera/model/collectives.h"

#include <algorithm>

namespace tessera::model {

void SingleRank::all_gather(const float* send, float* recv, int64_t n) {
  if (send != recv) std::copy(send, send + n, recv);
}

void SingleRank::reduce_scatter(const float* send, float* recv, int64_t n) {
  std::copy(send, send + n, recv);
}

void SingleRank::all_to_all(const float* send, std::span<const int64_t> send_counts, float* recv,
                            std::span<const int64_t>) {
  std::copy(send, send + send_counts[0], recv);
}

}  // namespace tessera::model
