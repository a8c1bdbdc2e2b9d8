#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "tessera/kernels/ops.h"

namespace tessera::model {

// n rows of `cols` values from `from` (from_ld apart) to `to` (to_ld apart).
template <typename V>
void copy_strided_rows(const V* from, int64_t from_ld, V* to, int64_t to_ld, int64_t n,
                       int64_t cols) {
  if (from_ld == cols && to_ld == cols) {
    std::copy_n(from, n * cols, to);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::copy_n(from + i * from_ld, cols, to + i * to_ld);
}

// How context parallelism splits each sequence of a micro-batch over the ranks of a cp group: into
// 2 x ranks chunks of equal length, rank r holding chunks r and 2 ranks - 1 - r, an early and a
// late one, so that causal attention's work is even over the ranks (Megatron-LM's and Llama 3's
// split). A rank's T rows of a sequence are its chunks, the early one first. One rank holds the
// whole sequence.
struct SequenceSplit {
  int64_t ranks = 1, rank = 0;

  // A run of a rank's rows of a sequence at consecutive positions: rows [row, row + n) hold
  // positions [position, position + n).
  struct Run {
    int64_t row, position, n;
  };
  using Runs = std::array<Run, kernels::QueryChunks::kMaxChunks>;

  bool active() const { return ranks > 1; }
  // Throws unless each rank's T rows of a sequence split into its two chunks.
  void check_rows(int64_t T) const;
  // Positions of a sequence of which each rank holds T rows.
  int64_t full_length(int64_t T) const { return T * ranks; }
  // The runs of rank `of`'s T rows of a sequence; returns how many there are (1 or 2).
  int64_t runs_of(int64_t of, int64_t T, Runs& runs) const;
  int64_t runs(int64_t T, Runs& out) const { return runs_of(rank, T, out); }
  // This rank's query rows for attention over the whole sequence (kernels::attention_forward).
  kernels::QueryChunks queries(int64_t T) const;

  // Copies `cols` values of each of rank `of`'s rows [B][T] (rows_ld apart) to their positions
  // in whole sequences [B][ranks T] (seq_ld apart), or back.
  template <typename V>
  void to_sequences(int64_t of, const V* rows, int64_t rows_ld, V* sequences, int64_t seq_ld,
                    int64_t B, int64_t T, int64_t cols) const {
    for_each_run(of, B, T, [&](int64_t row, int64_t position, int64_t n) {
      copy_strided_rows(rows + row * rows_ld, rows_ld, sequences + position * seq_ld, seq_ld, n,
                        cols);
    });
  }
  template <typename V>
  void to_rows(int64_t of, const V* sequences, int64_t seq_ld, V* rows, int64_t rows_ld, int64_t B,
               int64_t T, int64_t cols) const {
    for_each_run(of, B, T, [&](int64_t row, int64_t position, int64_t n) {
      copy_strided_rows(sequences + position * seq_ld, seq_ld, rows + row * rows_ld, rows_ld, n,
                        cols);
    });
  }
  // This rank's rows [B][T] of whole sequences of ids [B][ranks T].
  void take(const int32_t* sequences, int32_t* rows, int64_t B, int64_t T) const {
    to_rows(rank, sequences, 1, rows, 1, B, T, 1);
  }

 private:
  // Calls copy(row, position, n) for each run of rank `of` in each of B sequences, with row and
  // position counted over the batch: [B][T] rows, [B][ranks T] positions.
  template <typename Copy>
  void for_each_run(int64_t of, int64_t B, int64_t T, Copy&& copy) const {
    Runs runs;
    const int64_t count = runs_of(of, T, runs), full = full_length(T);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < count; ++i) {
        const Run& r = runs[size_t(i)];
        copy(b * T + r.row, b * full + r.position, r.n);
      }
    }
  }
};

}  // namespace tessera::model
