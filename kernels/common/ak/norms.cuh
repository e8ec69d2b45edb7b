// What the norm and quant families share: the row adapter over their common parameter layout,
// and the RMSNorm and LayerNorm formulas, each written once against the row interface of
// ak/reduce.cuh (divisions are __fdividef, as norm.cuh says why).
#pragma once

#include "ak/reduce.cuh"

namespace ak::norms {

// The ak_norm_params / ak_quant_params .flags bits kHasWeight, kHasBias and kGemma ((1 + weight)
// instead of weight, as Gemma's RMSNorm) are [constants.norms] of arch_matrix.toml, generated into
// this namespace by every family's params header.

// The adapter over a parameter struct P with the norm layout (out, x, residual, weight, bias,
// rows, hidden, inner, the row and outer strides, flags): the norm and quant families'. O is the
// output element type; kAdd reads the residual, kTwoLevel the two-level row index. Weight and
// bias are used when their flags bit is set (the host passes null otherwise).
template <class T_, class P, class O, bool kAdd, bool kTwoLevel>
struct ParamRows {
  using T = T_;
  static constexpr bool kRowWeight = false;
  const P& p;
  __device__ __forceinline__ O* out() const { return static_cast<O*>(p.out); }
  __device__ __forceinline__ const T* x() const { return static_cast<const T*>(p.x); }
  __device__ __forceinline__ T* residual() const {
    return kAdd ? static_cast<T*>(p.residual) : nullptr;
  }
  __device__ __forceinline__ const T* weight() const {
    return (p.flags & kHasWeight) ? static_cast<const T*>(p.weight) : nullptr;
  }
  __device__ __forceinline__ const T* bias() const {
    return (p.flags & kHasBias) ? static_cast<const T*>(p.bias) : nullptr;
  }
  __device__ __forceinline__ int64_t rows() const { return p.rows; }
  __device__ __forceinline__ int64_t cols() const { return p.hidden; }
  __device__ __forceinline__ int64_t x_stride() const { return p.x_row_stride; }
  __device__ __forceinline__ int64_t out_stride() const { return p.out_row_stride; }
  __device__ __forceinline__ int64_t res_stride() const { return kAdd ? p.residual_row_stride : 0; }
  __device__ __forceinline__ int64_t inner() const { return kTwoLevel ? p.inner : 0; }
  __device__ __forceinline__ int64_t x_outer() const { return p.x_outer_stride; }
  __device__ __forceinline__ int64_t out_outer() const { return p.out_outer_stride; }
  __device__ __forceinline__ static constexpr int64_t res_outer() { return 0; }
  __device__ __forceinline__ int64_t row_cols(int64_t) const { return p.hidden; }
  __device__ __forceinline__ bool gemma() const { return p.flags & kGemma; }
};

// y producers: prepare(r, eps) runs the norm's reductions over row r and returns
// y = f(x, w, b).
//
// RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, with (1 + w) under kGemma.
struct rms_norm_y {
  template <class Row>
  __device__ __forceinline__ static auto prepare(Row& r, float eps) {
    const float ss = rowwise::row_sum(r, [](float x) { return x * x; });
    const float scale = rsqrtf(__fdividef(ss, r.cols()) + eps);
    // A select, not w + 0: a -0 weight keeps the sign of its zero product.
    const bool gemma = r.row().a.gemma();
    return [=](float x, float w, float) { return x * scale * (gemma ? w + 1.f : w); };
  }
};

// LayerNorm, y = (x - mean) * rstd * w + b: two reductions, the mean, then the mean of
// (x - mean)^2 over the same (resident or re-read) values: no E[x^2] - mean^2 cancellation.
struct layer_norm_y {
  template <class Row>
  __device__ __forceinline__ static auto prepare(Row& r, float eps) {
    const float mean = __fdividef(rowwise::row_sum(r, [](float x) { return x; }), r.cols());
    const float var = __fdividef(rowwise::row_sum(r,
                                                  [=](float x) {
                                                    const float d = x - mean;
                                                    return d * d;
                                                  }),
                                 r.cols());
    const float rstd = rsqrtf(var + eps);
    return [=](float x, float w, float b) { return (x - mean) * rstd * w + b; };
  }
};

}  // namespace ak::norms
