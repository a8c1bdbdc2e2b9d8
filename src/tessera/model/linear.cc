#include "tessera/model/linear.h"

#include <algorithm>

#include "tessera/kernels/device.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/quantized_weights.h"

namespace tessera::model {

namespace k = kernels;

void MatmulFormat::finish(const k::Context& ctx, const MatmulInput& x, int64_t n) const {
  if (low && x.low != nullptr) k::cast_to_low(ctx, x.f32, x.low, n, precision);
}

void keep_matmul_input(const k::Context& ctx, const MatmulInput& from, const MatmulInput& to,
                       int64_t n) {
  if (to.low != nullptr && to.low != from.low) {
    k::copy_on_device(ctx, to.low, from.low, sizeof(uint16_t) * size_t(n));
  }
  if (to.f32 != nullptr && to.f32 != from.f32) {
    k::copy_on_device(ctx, to.f32, from.f32, sizeof(float) * size_t(n));
  }
}

Linear::Linear(const kernels::Context& ctx, int64_t in, int64_t out, PartOffsets params,
               MatmulFormat format, uint16_t* dy_low, float* int8_scratch)
    : ctx_(ctx),
      in_(in),
      out_(out),
      params_(params),
      format_(format),
      dy_low_(dy_low),
      int8_scratch_(int8_scratch) {}

void Linear::forward(const ParamAccess& p, const MatmulInput& x, float* y, int64_t N,
                     bool with_bias) const {
  const float* bias = with_bias && params_.bias >= 0 ? p.f32(params_.bias) : nullptr;
  if (const QuantizedWeights* quantized = p.quantized()) {
    quantized->forward(ctx_, params_.weight, x.f32, bias, y, N, int8_scratch_);
  } else if (format_.low) {
    k::linear_forward_low(ctx_, x.low, p.low(params_.weight), bias, y, N, in_, out_,
                          format_.precision);
  } else {
    k::linear_forward(ctx_, x.f32, p.f32(params_.weight), bias, y, N, in_, out_);
  }
}

MatmulInput Linear::output_gradient(const float* dy, const MatmulInput& into, int64_t N) const {
  if (format_.low) {
    k::cast_to_low(ctx_, dy, into.low, N * out_, format_.precision);
    return {nullptr, into.low};
  }
  if (into.f32 != dy) k::copy_on_device(ctx_, into.f32, dy, sizeof(float) * N * out_);
  return {into.f32, nullptr};
}

MatmulInput Linear::output_gradient(const float* dy, int64_t N) const {
  return output_gradient(dy, {const_cast<float*>(dy), dy_low_}, N);
}

void Linear::input_backward(const ParamAccess& p, const float* dy, const MatmulInput& g, float* dx,
                            int64_t N) const {
  float* db = params_.bias >= 0 ? p.grad(params_.bias) : nullptr;
  if (format_.low) {
    k::linear_backward_low(ctx_, dy, g.low, nullptr, p.low(params_.weight), dx, nullptr, db, N, in_,
                           out_, format_.precision);
  } else {
    k::linear_backward(ctx_, g.f32, static_cast<const float*>(nullptr), p.f32(params_.weight), dx,
                       static_cast<float*>(nullptr), db, N, in_, out_);
  }
}

void Linear::weight_backward(const MatmulInput& g, const MatmulInput& x, float* dw,
                             int64_t N) const {
  if (dw == nullptr) return;  // a frozen weight
  if (format_.low) {
    k::linear_backward_low(ctx_, nullptr, g.low, x.low, nullptr, nullptr, dw, nullptr, N, in_, out_,
                           format_.precision);
  } else {
    k::linear_backward(ctx_, g.f32, x.f32, static_cast<const float*>(nullptr),
                       static_cast<float*>(nullptr), dw, static_cast<float*>(nullptr), N, in_,
                       out_);
  }
}

}  // namespace tessera::model
