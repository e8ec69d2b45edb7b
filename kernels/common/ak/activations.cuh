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

// Exact GELU: x * Phi(x), Phi through erf.
template <class T>
struct gelu_fn {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
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
