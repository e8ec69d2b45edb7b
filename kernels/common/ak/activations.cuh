// Scalar activation functions in f32, shared by the activation and gated families.
#pragma once

namespace ak {

// `x < 0 ? 0 : x` rather than fmaxf: NaN must propagate, as torch.relu does.
struct relu_fn {
  __device__ __forceinline__ float operator()(float x) const { return x < 0.f ? 0.f : x; }
};

// Exact GELU: x * Phi(x), Phi through erf.
struct gelu_fn {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
  }
};

// GELU, tanh approximation (torch's approximate="tanh").
struct gelu_tanh_fn {
  __device__ __forceinline__ float operator()(float x) const {
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
};

struct sigmoid_fn {
  __device__ __forceinline__ float operator()(float x) const { return 1.f / (1.f + expf(-x)); }
};

struct silu_fn {
  __device__ __forceinline__ float operator()(float x) const { return x / (1.f + expf(-x)); }
};

}  // namespace ak
