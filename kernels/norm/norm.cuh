// Row normalizations over the last dimension, f32 accumulation, one rounding on store:
//   rms_norm            out = x * rsqrt(mean(x^2) + eps) * weight
//   fused_add_rms_norm  residual = round(x + residual); x = rms_norm(residual) * weight (in place)
//   (both with (1 + weight) instead of weight when flags has kGemma, as Gemma's RMSNorm)
//   layer_norm          out = (x - mean) * rsqrt(var + eps) * weight + bias (biased variance)
// Divisions are __fdividef (MUFU.RCP, ~2 ulp): IEEE division calls a slow-path subroutine whose
// calling convention costs registers the resident row needs, for no visible accuracy.
// Each op is one functor written against the row interface of ak/reduce.cuh, so the register
// path (rows up to 128 KB) and the multi-pass path (longer rows) share it; AK_ENTRY instantiates
// it per dtype. Rows may have two levels (`inner` > 1: [tokens, heads, head_dim] views of q/k
// with independent token and head strides, see Row in ak/reduce.cuh). weight/bias are used when
// their `flags` bit is set (the host passes null otherwise); layer_norm's variance is the mean of
// (x - mean)^2 over the register-resident (or re-read) row, not the cancellation-prone E[x^2] -
// mean^2.
#pragma once

#include "ak/reduce.cuh"

namespace ak::norm {

constexpr int kHasWeight = 1;  // ak_norm_params.flags bits
constexpr int kHasBias = 2;
constexpr int kGemma = 4;

struct rms_norm_fn {
  static constexpr bool kAddResidual = false;
  static constexpr bool kTwoLevel = true;
  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) const {
    const float ss = rowwise::row_sum(r, [](float x) { return x * x; });
    const float scale = rsqrtf(__fdividef(ss, r.cols()) + eps);
    // A select, not w + 0: a -0 weight keeps the sign of its zero product.
    const bool gemma = r.row().a.gemma();
    r.store([=](float x, float w, float) { return x * scale * (gemma ? w + 1.f : w); });
  }
};

// vLLM/FlashInfer convention: the sum is rounded to the storage dtype, written to residual, and
// that rounded value is what gets normalized.
struct fused_add_rms_norm_fn : rms_norm_fn {
  static constexpr bool kAddResidual = true;
  static constexpr bool kTwoLevel = false;  // hidden states: one row stride (as layer_norm)
};

// Two reductions: the mean, then the mean of (x - mean)^2 over the same (resident or re-read)
// values: no E[x^2] - mean^2 cancellation. (One reduction of per-thread (count, mean, M2)
// merged with Chan's update measured 13-15% slower on H200 at 16384 x {4096, 8192} bf16: the
// merges cost more than the barrier they save.)
struct layer_norm_fn {
  static constexpr bool kAddResidual = false;
  // One level only: the two-level offsets cost layer_norm's resident rows (two reductions and
  // a bias) 150-300 bytes of spills, and no model normalizes heads with it.
  static constexpr bool kTwoLevel = false;
  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) const {
    const float mean = __fdividef(rowwise::row_sum(r, [](float x) { return x; }), r.cols());
    const float var = __fdividef(rowwise::row_sum(r,
                                                  [=](float x) {
                                                    const float d = x - mean;
                                                    return d * d;
                                                  }),
                                 r.cols());
    const float rstd = rsqrtf(var + eps);
    r.store([=](float x, float w, float b) { return (x - mean) * rstd * w + b; });
  }
};

// The row adapter of ak/reduce.cuh over this family's parameters (read in place).
template <class T_, bool kAdd, bool kTwoLevel>
struct Rows {
  using T = T_;
  static constexpr bool kRowWeight = false;
  const ak_norm_params& p;
  __device__ __forceinline__ T* out() const { return static_cast<T*>(p.out); }
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

template <class Op, class T>
__device__ __forceinline__ void run(const ak_norm_params& p) {
  rowwise::run<Op>(Rows<T, Op::kAddResidual, Op::kTwoLevel>{p}, p.vecs_per_thread, p.eps);
}

}  // namespace ak::norm

#define AK_ENTRY(symbol, op, T)                                          \
  extern "C" __global__ void __launch_bounds__(ak::rowwise::kMaxThreads) \
      symbol(const __grid_constant__ ak_norm_params p) {                 \
    ak::norm::run<ak::norm::op##_fn, T>(p);                              \
  }
