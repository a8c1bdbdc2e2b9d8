#include "tessera/core/q4_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

// ggml's reference quantiser rounds every product and sum on its own (its library is built
// without fused multiply-adds); so do these, so that the same values give the same blocks.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace tessera {

namespace {

constexpr int kLevels = 15;  // the largest 4-bit level
constexpr int kGrid = 63;    // the largest 6-bit scale or min

int nearest(float x) { return int(std::nearbyint(x)); }

// A sub-block's scale and min (returned as -min >= 0) and levels L[32], chosen as ggml's
// make_qkx2_quants(32, 15, ..., -1, 0.1, 20, false) does: from the range, then 21 trial grids
// whose weighted least-squares fit is kept where it has the smaller weighted squared error.
float fit_sub_block(const float* x, const float* weight, uint8_t* L, float& neg_min) {
  constexpr int n = kQ4KSubBlockSize;
  float lo = x[0], hi = x[0], sum_w = weight[0], sum_x = weight[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += weight[i];
    sum_x += weight[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(L, L + n, uint8_t(0));
    neg_min = -lo;
    return 0.0f;
  }
  float iscale = kLevels / (hi - lo), scale = 1 / iscale, min = lo, best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(nearest(iscale * (x[i] - lo)), 0, kLevels));
    const float diff = scale * L[i] + lo - x[i];
    best += weight[i] * diff * diff;
  }
  uint8_t trial[n];
  for (int step = 0; step <= 20; ++step) {
    // From the best fit so far, as ggml does: its min moves the grid of the next trials.
    iscale = (-1.0f + 0.1f * float(step) + kLevels) / (hi - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      trial[i] = uint8_t(std::clamp(nearest(iscale * (x[i] - min)), 0, kLevels));
      sum_l += weight[i] * trial[i];
      sum_l2 += weight[i] * trial[i] * trial[i];
      sum_xl += weight[i] * trial[i] * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * trial[i] + this_min - x[i];
      error += weight[i] * diff * diff;
    }
    if (error < best) {
      std::copy(trial, trial + n, L);
      best = error;
      scale = this_scale;
      min = this_min;
    }
  }
  neg_min = -min;
  return scale;
}

}  // namespace

uint16_t Q4KBlockView::d() const {
  uint16_t h;
  std::memcpy(&h, bytes, sizeof h);
  return h;
}

uint16_t Q4KBlockView::dmin() const {
  uint16_t h;
  std::memcpy(&h, bytes + 2, sizeof h);
  return h;
}

void Q4KBlockView::scale_min(int64_t j, uint8_t& scale, uint8_t& min) const {
  const uint8_t* q = bytes + 4;
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

uint8_t Q4KBlockView::level(int64_t i) const {
  const uint8_t byte = bytes[4 + kQ4KScaleBytes + (i / 64) * 32 + i % 32];
  return i % 64 < 32 ? byte & 0x0F : byte >> 4;
}

void quantize_q4_k_block(const float* x, uint8_t* block) {
  uint8_t L[kQ4KBlockSize];
  float scales[kQ4KSubBlocks], mins[kQ4KSubBlocks], weight[kQ4KSubBlockSize];
  float max_scale = 0, max_min = 0;
  for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
    const float* sub = x + j * kQ4KSubBlockSize;
    float sum_x2 = 0;
    for (int64_t l = 0; l < kQ4KSubBlockSize; ++l) sum_x2 += sub[l] * sub[l];
    const float rms = std::sqrt(sum_x2 / kQ4KSubBlockSize);
    for (int64_t l = 0; l < kQ4KSubBlockSize; ++l) weight[l] = rms + std::fabs(sub[l]);
    scales[j] = fit_sub_block(sub, weight, L + j * kQ4KSubBlockSize, mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  std::memset(block, 0, kQ4KBlockBytes);
  uint8_t* packed = block + 4;
  const float inv_scale = max_scale > 0 ? kGrid / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? kGrid / max_min : 0.0f;
  for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
    const auto ls = uint8_t(std::min(kGrid, nearest(inv_scale * scales[j])));
    const auto lm = uint8_t(std::min(kGrid, nearest(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls >> 4) << 6);
      packed[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  const uint16_t d = f32_to_f16(max_scale / kGrid), dmin = f32_to_f16(max_min / kGrid);
  std::memcpy(block, &d, sizeof d);
  std::memcpy(block + 2, &dmin, sizeof dmin);
  // The levels again, against the scales and mins as rounded to their grids.
  const Q4KBlockView view{block};
  for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
    uint8_t sc, m;
    view.scale_min(j, sc, m);
    const float step = f16_to_f32(d) * float(sc);
    if (step == 0.0f) continue;
    const float offset = f16_to_f32(dmin) * float(m);
    for (int64_t i = j * kQ4KSubBlockSize; i < (j + 1) * kQ4KSubBlockSize; ++i) {
      L[i] = uint8_t(std::clamp(nearest((x[i] + offset) / step), 0, kLevels));
    }
  }
  uint8_t* q = block + 4 + kQ4KScaleBytes;
  for (int64_t run = 0; run < kQ4KBlockSize; run += 64) {
    for (int64_t l = 0; l < 32; ++l) q[l] = uint8_t(L[run + l] | (L[run + l + 32] << 4));
    q += 32;
  }
}

void quantize_q4_k(std::span<const float> values, std::span<uint8_t> blocks) {
  check(values.size() % kQ4KBlockSize == 0 &&
            blocks.size() == values.size() / kQ4KBlockSize * kQ4KBlockBytes,
        "q4_k: {} values and {} bytes do not make whole super-blocks of {}", values.size(),
        blocks.size(), kQ4KBlockSize);
  const int64_t n = int64_t(values.size()) / kQ4KBlockSize;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; ++b) {
    quantize_q4_k_block(values.data() + b * kQ4KBlockSize, blocks.data() + b * kQ4KBlockBytes);
  }
}

}  // namespace tessera

#pragma GCC pop_options
