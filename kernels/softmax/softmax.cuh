// Softmax over the last dimension: out = exp(x - max(x)) / sum(exp(x - max(x))), f32 math, one
// rounding on store. NaN (or +inf) anywhere in a row makes the row NaN; a row that is entirely
// -inf (fully masked) stores 0 (the safe-softmax convention), where torch.softmax gives NaN. The
// row is register-resident up to 128 KB and streamed three times beyond (max, sum, store); see
// ak/reduce.cuh.
//
// softmax_backward: from y = softmax(x) (the forward's output, passed as `x`) and dy,
//   dx = y * (dy - sum(dy * y))        (per row; the Jacobian of softmax applied to dy)
// with y and dy resident up to 64 KB each (N <= 4 packets per thread) and streamed twice beyond.
#pragma once

#include "ak/reduce.cuh"

namespace ak::softmax {

constexpr float kLog2e = 1.4426950408889634f;

// (max, sum of exp(x - max)) of a set of values; merging rescales the smaller side's sum. A
// side with max -inf holds only -inf (or nothing) and sum 0; a NaN in the data lives in the
// sum (fmaxf drops it from the max) and poisons every merge it takes part in.
struct MaxSumExp {
  static constexpr bool kCommutative = false;
  __device__ __forceinline__ static void identity(float (&v)[2]) {
    v[0] = -__int_as_float(0x7f800000);
    v[1] = 0.f;
  }
  __device__ __forceinline__ void operator()(float (&a)[2], const float (&b)[2]) const {
    const float m = fmaxf(a[0], b[0]);
    const float sa = a[0] == m ? a[1] : a[1] * fast_exp2((a[0] - m) * kLog2e);
    const float sb = b[0] == m ? b[1] : b[1] * fast_exp2((b[0] - m) * kLog2e);
    a[0] = m;
    a[1] = sa + sb;
  }
};

// Per thread: the max of its elements, then the sum of exp(x - that max) (two passes over
// registers, no barrier); one group reduction merges the (max, sum) pairs. exp(x - m) is
// 2^((x - m) * log2e), subtraction first so that rows of huge magnitude (|x| ~ 1e30) keep exact
// zeros at the max. An all -inf row has no max to subtract: 0 instead makes every term
// exp(-inf) = 0, the sum 0, and the row stores 0.
struct softmax_fn {
  static constexpr bool kAddResidual = false;
  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float) const {
    float mx[rowwise::kLanes];
#pragma unroll
    for (int l = 0; l < rowwise::kLanes; ++l) mx[l] = -__int_as_float(0x7f800000);
    r.for_each([&](float x, int lane) { mx[lane] = fmaxf(mx[lane], x); });
    const float m_t = fmaxf(fmaxf(mx[0], mx[1]), fmaxf(mx[2], mx[3]));
    const float shift_t = m_t == -__int_as_float(0x7f800000) ? 0.f : m_t;
    float acc[rowwise::kLanes] = {};
    r.for_each([&](float x, int lane) { acc[lane] += fast_exp2((x - shift_t) * kLog2e); });
    float st[2] = {m_t, (acc[0] + acc[1]) + (acc[2] + acc[3])};
    r.template group<MaxSumExp>(st);
    const float m = st[0] == -__int_as_float(0x7f800000) ? 0.f : st[0];
    // st[1] == 0 only for an all -inf row; a NaN sum makes 1/sum NaN and the row NaN.
    // __fdividef: see norm.cuh.
    const float inv = st[1] == 0.f ? 0.f : __fdividef(1.f, st[1]);
    r.store([=](float x, float, float) { return fast_exp2((x - m) * kLog2e) * inv; });
  }
};

// One group reduction (sum of dy * y), then one store pass; no per-column state.
template <int /*kSlots: unused*/>
struct softmax_backward_row {
  static constexpr bool kStream = true;
  static constexpr int kMaxN = kBackwardMaxN;  // [families.softmax.constants] (softmax_params.h)
  static constexpr int kScalarN = kBackwardMaxN;
  template <class A>
  __device__ __forceinline__ explicit softmax_backward_row(const A&) {}

  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float) const {
    float acc[rowwise::kLanes] = {};
    r.for_each([&](float y, float dy, float, int lane) { acc[lane] += dy * y; });
    float v[1] = {(acc[0] + acc[1]) + (acc[2] + acc[3])};
    r.template group<Sum<1>>(v);
    const float s = v[0];
    r.store([=](float y, float dy, float) { return y * (dy - s); });
  }

  template <class R, class A>
  __device__ __forceinline__ void finish(const A&) const {}
};

struct softmax_backward_fn {
  static constexpr bool kBackward = true;
  template <int kSlots>
  using Fn = softmax_backward_row<kSlots>;
};

// The row adapter of ak/reduce.cuh over this family's parameters (read in place).
template <class T_>
struct Rows : rowwise::OneLevel {
  using T = T_;
  const ak_softmax_params& p;
  __device__ __forceinline__ T* out() const { return static_cast<T*>(p.out); }
  __device__ __forceinline__ const T* x() const { return static_cast<const T*>(p.x); }
  __device__ __forceinline__ T* residual() const { return nullptr; }
  __device__ __forceinline__ const T* weight() const { return nullptr; }
  __device__ __forceinline__ const T* bias() const { return nullptr; }
  __device__ __forceinline__ int64_t rows() const { return p.rows; }
  __device__ __forceinline__ int64_t cols() const { return p.cols; }
  __device__ __forceinline__ int64_t x_stride() const { return p.x_row_stride; }
  __device__ __forceinline__ int64_t out_stride() const { return p.out_row_stride; }
  __device__ __forceinline__ int64_t res_stride() const { return 0; }
  __device__ __forceinline__ int64_t row_cols(int64_t) const { return p.cols; }
  __device__ __forceinline__ const T* dy() const { return static_cast<const T*>(p.dy); }
  __device__ __forceinline__ int64_t dy_stride() const { return p.dy_row_stride; }
};

template <class Op, class T>
__device__ __forceinline__ void run(const ak_softmax_params& p) {
  if constexpr (kIsBackward<Op>) {
    rowwise::run_grad<Op::template Fn>(Rows<T>{{}, p}, p.vecs_per_thread, 0.f);
  } else {
    rowwise::run<Op>(Rows<T>{{}, p}, p.vecs_per_thread, 0.f);
  }
}

}  // namespace ak::softmax

#define AK_ENTRY(symbol, op, T)                                          \
  extern "C" __global__ void __launch_bounds__(ak::rowwise::kMaxThreads) \
      symbol(const __grid_constant__ ak_softmax_params p) {              \
    ak::softmax::run<ak::softmax::op##_fn, T>(p);                        \
  }
