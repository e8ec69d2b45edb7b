// Row normalizations over the last dimension, f32 accumulation, one rounding on store:
//   rms_norm            out = x * rsqrt(mean(x^2) + eps) * weight
//   fused_add_rms_norm  residual = round(x + residual); x = rms_norm(residual) * weight (in place)
//   (both with (1 + weight) instead of weight when flags has kGemma, as Gemma's RMSNorm)
//   layer_norm          out = (x - mean) * rsqrt(var + eps) * weight + bias (biased variance)
// Divisions are __fdividef (MUFU.RCP, ~2 ulp): IEEE division calls a slow-path subroutine whose
// calling convention costs registers the resident row needs, for no visible accuracy.
// Each op is one functor written against the row interface of ak/reduce.cuh, so the register
// path (rows up to 128 KB) and the multi-pass path (longer rows) share it; AK_ENTRY instantiates
// it per dtype. rms_norm rows may have two levels (`inner` > 1: [tokens, heads, head_dim] views
// of q/k with independent token and head strides, see Row in ak/reduce.cuh). weight/bias are
// used when their `flags` bit is set (the host passes null otherwise); layer_norm's variance is the
// mean of (x - mean)^2 over the register-resident (or re-read) row, not the cancellation-prone
// E[x^2] - mean^2.
//
// Backward (x, weight and dy = the gradient of out; mean and rstd recomputed from x):
//   rms_norm_backward    dx = rstd * w * dy - x * rstd^3 * mean(x * w * dy)
//                        dweight = sum over rows of dy * x * rstd
//   layer_norm_backward  xhat = (x - mean) * rstd, g = w * dy
//                        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//                        dweight = sum over rows of dy * xhat, dbias = sum over rows of dy
// dweight / dbias are column sums over all rows, made bitwise repeatable without atomics in two
// launches: the row kernel keeps each thread's columns' sums in registers across the rows its
// row group visits (the row must be register-resident: N <= 2 packets per thread, so hidden <=
// 2048 * V) and writes them once as row p = blockIdx.x * blockDim.y + threadIdx.y of the f32
// workspace ws[2][partials][hidden] (dweight's, then dbias's, partials = gridDim.x * blockDim.y);
// norm_reduce_cols then sums each column's partials in a fixed order and rounds once to the
// weight dtype. The same launch shape gives the same bits.
#pragma once

#include "ak/norms.cuh"

namespace ak::norm {

// The ak_norm_params.flags bits (kHasWeight, kHasBias, kGemma: [constants.norms], in ak::norms)
// and kBackwardMaxN ([families.norm.constants]) come from norm_params.h, generated from
// arch_matrix.toml.
using norms::kHasBias;
using norms::kHasWeight;

// Stores y of the producer Y (ak/norms.cuh) over each row, kAdd: after residual = round(x +
// residual) (the vLLM/FlashInfer convention: that rounded sum is what gets normalized).
template <class Y, bool kAdd, bool kTwoLevel_>
struct store_y_fn {
  static constexpr bool kAddResidual = kAdd;
  static constexpr bool kTwoLevel = kTwoLevel_;
  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) const {
    r.store(Y::prepare(r, eps));
  }
};

using rms_norm_fn = store_y_fn<norms::rms_norm_y, false, true>;
// Hidden states: one row stride (as layer_norm).
using fused_add_rms_norm_fn = store_y_fn<norms::rms_norm_y, true, false>;
// One level only: the two-level offsets cost layer_norm's resident rows (two reductions and a
// bias) 150-300 bytes of spills, and no model normalizes heads with it. (One reduction of
// per-thread (count, mean, M2) merged with Chan's update, instead of layer_norm_y's two,
// measured 13-15% slower on H200 at 16384 x {4096, 8192} bf16: the merges cost more than the
// barrier they save.)
using layer_norm_fn = store_y_fn<norms::layer_norm_y, false, false>;

// --- backward ----------------------------------------------------------------------------------

// Resident per thread: N <= 2 packets of x and of dy and N * V column sums (two sets with a
// bias), under the 64 registers of 1024-thread blocks (N = 4 took 128 registers, halving the
// threads an SM holds). rms_norm_backward fits without spills; layer_norm_backward at N = 2
// spills ~70 bytes in 16-bit (ptxas -v, sm_90), so the host gives it N = 1 up to 512 packets
// (python/aotkernels/ops/_backward.py). Rows of up to 2 * 1024 * V elements (16384 16-bit,
// 8192 f32) fit.

// Partial row of this thread's row group in ws.
__device__ __forceinline__ int64_t partial_index() {
  return int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
}
__device__ __forceinline__ int64_t partials() { return int64_t(gridDim.x) * blockDim.y; }

template <int kSlots>
struct rms_norm_backward_row {
  static constexpr bool kStream = false;
  static constexpr int kMaxN = kBackwardMaxN;
  static constexpr int kScalarN = kBackwardMaxN;
  float dw[kSlots];
  bool has_w;

  template <class A>
  __device__ __forceinline__ explicit rms_norm_backward_row(const A& a)
      : has_w(a.weight() != nullptr) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) dw[k] = 0.f;
  }

  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) {
    float ss[rowwise::kLanes] = {}, sg[rowwise::kLanes] = {};
    r.for_each([&](float x, float dy, float w, int lane) {
      ss[lane] += x * x;
      sg[lane] += x * (w * dy);
    });
    float v[2] = {(ss[0] + ss[1]) + (ss[2] + ss[3]), (sg[0] + sg[1]) + (sg[2] + sg[3])};
    r.template group<Sum<2>>(v);
    const float rstd = rsqrtf(__fdividef(v[0], r.cols()) + eps);  // as the forward
    const float c = rstd * rstd * rstd * __fdividef(v[1], r.cols());
    if (has_w) r.for_each_slot([&](int k, float x, float dy) { dw[k] += dy * (x * rstd); });
    r.store([=](float x, float dy, float w) { return rstd * (w * dy) - c * x; });
  }

  template <class R, class A>
  __device__ __forceinline__ void finish(const A& a) const {
    if (has_w) R::write_cols(a.ws() + partial_index() * a.cols(), a.cols(), dw);
  }
};

template <int kSlots>
struct layer_norm_backward_row {
  static constexpr bool kStream = false;
  static constexpr int kMaxN = kBackwardMaxN;
  static constexpr int kScalarN = kBackwardMaxN;
  float dw[kSlots], db[kSlots];
  bool has_w, has_b;

  template <class A>
  __device__ __forceinline__ explicit layer_norm_backward_row(const A& a)
      : has_w(a.weight() != nullptr), has_b(a.has_bias()) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) dw[k] = db[k] = 0.f;
  }

  // Two reductions as the forward: the mean, then (sum (x - mean)^2, sum g, sum g (x - mean)).
  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) {
    float sx[rowwise::kLanes] = {};
    r.for_each([&](float x, float, float, int lane) { sx[lane] += x; });
    float m[1] = {(sx[0] + sx[1]) + (sx[2] + sx[3])};
    r.template group<Sum<1>>(m);
    const float mean = __fdividef(m[0], r.cols());
    float sd[rowwise::kLanes] = {}, sg[rowwise::kLanes] = {}, sgd[rowwise::kLanes] = {};
    r.for_each([&](float x, float dy, float w, int lane) {
      const float d = x - mean;
      const float g = w * dy;
      sd[lane] += d * d;
      sg[lane] += g;
      sgd[lane] += g * d;
    });
    float v[3] = {(sd[0] + sd[1]) + (sd[2] + sd[3]), (sg[0] + sg[1]) + (sg[2] + sg[3]),
                  (sgd[0] + sgd[1]) + (sgd[2] + sgd[3])};
    r.template group<Sum<3>>(v);
    const float rstd = rsqrtf(__fdividef(v[0], r.cols()) + eps);
    const float mean_g = __fdividef(v[1], r.cols());
    const float mean_gx = __fdividef(v[2], r.cols()) * rstd;  // mean(g * xhat)
    if (has_w || has_b) {
      r.for_each_slot([&](int k, float x, float dy) {
        if (has_w) dw[k] += dy * ((x - mean) * rstd);
        if (has_b) db[k] += dy;
      });
    }
    r.store([=](float x, float dy, float w) {
      return rstd * (w * dy - mean_g - ((x - mean) * rstd) * mean_gx);
    });
  }

  template <class R, class A>
  __device__ __forceinline__ void finish(const A& a) const {
    const int64_t n = a.cols();
    if (has_w) R::write_cols(a.ws() + partial_index() * n, n, dw);
    if (has_b) R::write_cols(a.ws() + (partials() + partial_index()) * n, n, db);
  }
};

struct rms_norm_backward_fn {
  static constexpr bool kBackward = true;
  template <int kSlots>
  using Fn = rms_norm_backward_row<kSlots>;
};

struct layer_norm_backward_fn {
  static constexpr bool kBackward = true;
  template <int kSlots>
  using Fn = layer_norm_backward_row<kSlots>;
};

// norm_reduce_cols: dweight[c] = sum over p of ws[0][p][c] (flags bit 0), dbias[c] = sum over p
// of ws[1][p][c] (bit 1), for p < rows (the row kernel's partials), rounded once. Block (32, 32):
// threadIdx.x is the column, threadIdx.y one of 32 partial lanes (lane y sums p = y, y + 32, ...
// into kReduceUnroll accumulators, in order); the lanes then meet in shared memory and lane 0 sums
// them in order. blockIdx.y 0 is dweight, 1 dbias.
struct norm_reduce_cols_fn {
  static constexpr bool kReduceCols = true;
};

// kReduceLanes: [families.norm.constants] reduce_lanes (norm_params.h).
constexpr int kReduceUnroll = 4;  // independent loads in flight per thread (8 spilled, sm_90)

template <class T>
__device__ __forceinline__ void reduce_cols(const ak_norm_params& p) {
  __shared__ float part[kReduceLanes][33];  // +1: lane y's row starts in another bank
  const bool bias = blockIdx.y == 1;
  if (!(p.flags & (bias ? kHasBias : kHasWeight))) return;  // uniform over the block
  const int64_t np = p.rows, n = p.hidden;
  const float* ws = static_cast<const float*>(p.ws) + (bias ? np * n : 0);
  T* dst = static_cast<T*>(bias ? p.dbias : p.dweight);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c0 = int64_t(blockIdx.x) * blockDim.x; c0 < n; c0 += step) {
    const int64_t c = c0 + threadIdx.x;
    float acc[kReduceUnroll] = {};
    if (c < n) {
      for (int64_t q = threadIdx.y; q < np; q += kReduceUnroll * kReduceLanes) {
#pragma unroll
        for (int k = 0; k < kReduceUnroll; ++k) {
          const int64_t qk = q + k * kReduceLanes;
          if (qk < np) acc[k] += ws[qk * n + c];
        }
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kReduceUnroll; ++k) sum += acc[k];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < n) {
      float total = 0.f;
      for (int y = 0; y < int(blockDim.y); ++y) total += part[y][threadIdx.x];
      dst[c] = from_f32<T>(total);
    }
    __syncthreads();  // part is reused by the next columns
  }
}

// The row adapter of ak/reduce.cuh over this family's parameters (read in place), with the
// backward ops' fields.
template <class T, bool kAdd, bool kTwoLevel>
struct Rows : norms::ParamRows<T, ak_norm_params, T, kAdd, kTwoLevel> {
  __device__ __forceinline__ const T* dy() const { return static_cast<const T*>(this->p.dy); }
  __device__ __forceinline__ int64_t dy_stride() const { return this->p.dy_row_stride; }
  __device__ __forceinline__ float* ws() const { return static_cast<float*>(this->p.ws); }
  __device__ __forceinline__ bool has_bias() const { return this->p.flags & kHasBias; }
};

template <class Op, class = void>
inline constexpr bool kIsReduceCols = false;
template <class Op>
inline constexpr bool kIsReduceCols<Op, std::void_t<decltype(Op::kReduceCols)>> = true;

template <class Op, class T>
__device__ __forceinline__ void run(const ak_norm_params& p) {
  if constexpr (kIsReduceCols<Op>) {
    reduce_cols<T>(p);
  } else if constexpr (kIsBackward<Op>) {
    rowwise::run_grad<Op::template Fn>(Rows<T, false, false>{{p}}, p.vecs_per_thread, p.eps);
  } else {
    rowwise::run<Op>(Rows<T, Op::kAddResidual, Op::kTwoLevel>{{p}}, p.vecs_per_thread, p.eps);
  }
}

}  // namespace ak::norm

#define AK_ENTRY(symbol, op, T)                                          \
  extern "C" __global__ void __launch_bounds__(ak::rowwise::kMaxThreads) \
      symbol(const __grid_constant__ ak_norm_params p) {                 \
    ak::norm::run<ak::norm::op##_fn, T>(p);                              \
  }
