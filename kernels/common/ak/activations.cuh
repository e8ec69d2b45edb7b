// Scalar activation functions in f32, shared by the activation and gated families.
//
// T is the storage type. For f16/bf16 results the final rounding (2^-11 / 2^-8 relative) dwarfs
// the few-ulp f32 error of the hardware approximations (__expf, __fdividef), while libm's
// accurate expf and IEEE division would make these memory-bound kernels compute-bound on
// 16-bit data; f32 results keep the accurate functions.
#pragma once

#include <type_traits>

#include "ak/dtype.cuh"  // kIsBackward

namespace ak {

template <class T>
inline constexpr bool kFastMath = !std::is_same_v<T, float>;

template <class T>
__device__ __forceinline__ float exp_(float x) {
  if constexpr (kFastMath<T>) {
    return __expf(x);
  } else {
    return expf(x);
  }
}

// 1 / (1 + e); e may be +inf (gives 0).
template <class T>
__device__ __forceinline__ float inv_1p(float e) {
  if constexpr (kFastMath<T>) {
    return __fdividef(1.f, 1.f + e);
  } else {
    return 1.f / (1.f + e);
  }
}

// `x < 0 ? 0 : x` rather than fmaxf: NaN must propagate, as torch.relu does.
template <class T>
struct relu_fn {
  __device__ __forceinline__ float operator()(float x) const { return x < 0.f ? 0.f : x; }
};

// erfc(z) for z >= 0 with fractional error < 1.2e-7 everywhere (a Chebyshev fit in
// t = 1 / (1 + z/2), Numerical Recipes' erfcc): one exp and nine FMAs, against erff's longer
// branchy polynomial; relative accuracy holds in the tail, where 1 + erf(x) would cancel.
template <class T>
__device__ __forceinline__ float erfc_pos(float z) {
  const float t = inv_1p<T>(0.5f * z);
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  return t * exp_<T>(fmaf(-z, z, p));
}

// Exact GELU: x * Phi(x). f32 results use libm's erff; 16-bit results use erfc_pos, which is
// exact to ~1e-6 relative (with the fast exp) and keeps these kernels memory-bound.
template <class T>
struct gelu_fn {
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (kFastMath<T>) {
      const float half_c = 0.5f * erfc_pos<T>(fabsf(x) * 0.70710678118654752f);
      return x * (x >= 0.f ? 1.f - half_c : half_c);
    } else {
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    }
  }
};

// GELU, tanh approximation (torch's approximate="tanh"), written as x * sigmoid(2z) since
// 0.5 * (1 + tanh(z)) == sigmoid(2z): one exp, and no cancellation of 1 + tanh(z) for z << 0.
template <class T>
struct gelu_tanh_fn {
  __device__ __forceinline__ float operator()(float x) const {
    const float k2 = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
    return x * inv_1p<T>(exp_<T>(-k2 * (x + 0.044715f * x * x * x)));
  }
};

template <class T>
struct sigmoid_fn {
  __device__ __forceinline__ float operator()(float x) const { return inv_1p<T>(exp_<T>(-x)); }
};

template <class T>
struct silu_fn {
  __device__ __forceinline__ float operator()(float x) const { return x * inv_1p<T>(exp_<T>(-x)); }
};

// --- Derivatives (the backward ops) -------------------------------------------------------------
// Each returns the activation's value and its derivative at x, sharing the exponential. The
// backward kernels compute dx = dy * f'(x) (the gated ones also use f(x)). Where s (1 - s)
// appears (s a sigmoid), 1 - s is taken as e * s with e the exponential that gave
// s = 1 / (1 + e): it keeps its relative accuracy for large x, where 1.f - s cancels to 0.
// e = +inf (s = 0) is the one case where that product is inf * 0; 1 - s is exactly 1 there.
// (A fast-math s flushes to 0 for e > 2^126; every derivative below is then 0, as it is to f32
// precision.)
struct ValueGrad {
  float v, d;
};

__device__ __forceinline__ float one_minus_sigmoid(float e, float s) {
  return e == __int_as_float(0x7f800000) ? 1.f : e * s;
}

// sigmoid: s = 1 / (1 + e^-x), s' = s (1 - s).
template <class T>
struct sigmoid_vg {
  __device__ __forceinline__ ValueGrad operator()(float x) const {
    const float e = exp_<T>(-x);
    const float s = inv_1p<T>(e);
    return {s, s * one_minus_sigmoid(e, s)};
  }
};

// silu: x s, (x s)' = s (1 + x (1 - s)) (torch's silu_backward formula).
template <class T>
struct silu_vg {
  __device__ __forceinline__ ValueGrad operator()(float x) const {
    const float e = exp_<T>(-x);
    const float s = inv_1p<T>(e);
    return {x * s, s * (1.f + x * one_minus_sigmoid(e, s))};
  }
};

// Exact GELU: x Phi(x), (x Phi(x))' = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
// f32 takes Phi from normcdff (accurate in both tails); 16-bit results take it from erfc_pos as
// the forward does.
template <class T>
struct gelu_vg {
  __device__ __forceinline__ ValueGrad operator()(float x) const {
    float cdf;
    if constexpr (kFastMath<T>) {
      const float half_c = 0.5f * erfc_pos<T>(fabsf(x) * 0.70710678118654752f);
      cdf = x >= 0.f ? 1.f - half_c : half_c;
    } else {
      cdf = normcdff(x);
    }
    const float pdf = 0.39894228040143268f * exp_<T>(-0.5f * x * x);
    return {x * cdf, cdf + x * pdf};
  }
};

// GELU tanh approximation: x s with s = sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3) (the
// forward's form). (x s)' = s + x s (1 - s) * 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), which is
// torch's 0.5 (1 + tanh z) + 0.5 x (1 - tanh^2 z) z' rewritten with tanh z = 2s - 1.
template <class T>
struct gelu_tanh_vg {
  __device__ __forceinline__ ValueGrad operator()(float x) const {
    const float k2 = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
    const float x2 = x * x;
    const float e = exp_<T>(-k2 * (x + 0.044715f * x2 * x));
    const float s = inv_1p<T>(e);
    const float dz2 = k2 * fmaf(0.134145f, x2, 1.f);  // d(2z)/dx; 0.134145 = 3 * 0.044715
    return {x * s, s + x * (s * one_minus_sigmoid(e, s)) * dz2};
  }
};

// The activation family's backward ops: dx = dy * f'(x) from the forward's input x.
template <class T>
struct relu_backward_fn {
  static constexpr bool kBackward = true;
  // A select, not dy * step(x): torch's threshold_backward gives 0 where x <= 0 even for a
  // NaN / inf dy, and passes dy through where x is NaN (NaN <= 0 is false).
  __device__ __forceinline__ float operator()(float x, float dy) const {
    return x <= 0.f ? 0.f : dy;
  }
};

// The backward op of an activation whose value and derivative VG gives: dx = dy * f'(x) (the
// gated family's backward ops take both through vg).
template <class VG>
struct backward_fn {
  static constexpr bool kBackward = true;
  __device__ __forceinline__ ValueGrad vg(float x) const { return VG()(x); }
  __device__ __forceinline__ float operator()(float x, float dy) const { return dy * vg(x).d; }
};

template <class T>
using sigmoid_backward_fn = backward_fn<sigmoid_vg<T>>;
template <class T>
using silu_backward_fn = backward_fn<silu_vg<T>>;
template <class T>
using gelu_backward_fn = backward_fn<gelu_vg<T>>;
template <class T>
using gelu_tanh_backward_fn = backward_fn<gelu_tanh_vg<T>>;

}  // namespace ak
