// Scalar activation functions in f32, shared by the activation and gated families.
//
// T is the storage type. For f16/bf16 results the final rounding (2^-11 / 2^-8 relative) dwarfs
// the few-ulp f32 error of the hardware approximations (__expf, __fdividef), while libm's
// accurate expf and IEEE division would make these memory-bound kernels compute-bound on
// 16-bit data; f32 results keep the accurate functions.
#pragma once

#include <type_traits>

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

}  // namespace ak
