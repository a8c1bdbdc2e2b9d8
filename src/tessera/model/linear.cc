#include "tessera/model/linear.h"

#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

void MatmulFormat::finish(const MatmulInput& x, int64_t n) const {
  if (low && x.low != nullptr) k::cast_to_low(x.f32, x.low, n, precision);
}

Linear::Linear(int64_t in, int64_t out, PartOffsets params, MatmulFormat format, uint16_t* dy_low,
               float* int8_scratch)
    : in_(in),
      out_(out),
      params_(params),
      format_(format),
      dy_low_(dy_low),
      int8_scratch_(int8_scratch) {}

void Linear::forward(const ParamAccess& p, const MatmulInput& x, float* y, int64_t N,
                     bool with_bias) const {
  const float* bias = with_bias && params_.bias >= 0 ? p.f32(params_.bias) : nullptr;
  if (p.int8_weights()) {
    k::linear_forward_int8(x.f32, p.int8(params_.weight), bias, y, N, int8_scratch_);
  } else if (format_.low) {
    k::linear_forward_low(x.low, p.low(params_.weight), bias, y, N, in_, out_, format_.precision);
  } else {
    k::linear_forward(x.f32, p.f32(params_.weight), bias, y, N, in_, out_);
  }
}

void Linear::backward(const ParamAccess& p, const float* dy, const MatmulInput& x, float* dx,
                      int64_t N) const {
  backward_into(p, dy, x, dx, p.grad(params_.weight), N);
}

void Linear::backward_into(const ParamAccess& p, const float* dy, const MatmulInput& x, float* dx,
                           float* dw, int64_t N) const {
  float* db = params_.bias >= 0 ? p.grad(params_.bias) : nullptr;
  if (format_.low) {
    k::cast_to_low(dy, dy_low_, N * out_, format_.precision);
    k::linear_backward_low(dy, dy_low_, x.low, p.low(params_.weight), dx, dw, db, N, in_, out_,
                           format_.precision);
  } else {
    k::linear_backward(dy, x.f32, p.f32(params_.weight), dx, dw, db, N, in_, out_);
  }
}

}  // namespace tessera::model
