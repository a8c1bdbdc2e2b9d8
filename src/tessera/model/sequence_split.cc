#include "tessera/model/sequence_split.h"

#include "tessera/core/error.h"

namespace tessera::model {

void SequenceSplit::check_rows(int64_t T) const {
  check(!active() || T % 2 == 0,
        "context parallelism gives each of its {} ranks two equal chunks of a sequence, but a "
        "rank's share is {} positions: make train.seq_len a multiple of 2 x mesh.cp",
        ranks, T);
}

int64_t SequenceSplit::runs_of(int64_t of, int64_t T, Runs& runs) const {
  if (!active()) {
    runs[0] = {0, 0, T};
    return 1;
  }
  check_rows(T);
  const int64_t chunk = T / 2;
  runs[0] = {0, of * chunk, chunk};
  runs[1] = {chunk, (2 * ranks - 1 - of) * chunk, chunk};
  return 2;
}

kernels::QueryChunks SequenceSplit::queries(int64_t T) const {
  if (!active()) return {};
  Runs runs;
  runs_of(rank, T, runs);
  return {.count = 2, .length = T / 2, .start = {runs[0].position, runs[1].position}};
}

}  // namespace tessera::model
