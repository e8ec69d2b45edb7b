// Gated activations out[r, :d] = act(x[r, :d]) * x[r, d:2d] over rows with row strides.
//
// Same launch shape as the activation family: a 2-D block over (d, rows), grid-stride in both.
// A row takes the vector path when its gate, up and out pointers are all 16-byte aligned
// (so d must be a multiple of the vector width); the rest is scalar. 64-bit indices.
#pragma once

#include "ak/activations.cuh"
#include "ak/dtype.cuh"

namespace ak::gated {

constexpr int kMaxThreads = 256;
constexpr int kUnroll = 2;  // two (gate, up) vector pairs in flight per thread

template <class T>
struct silu_and_mul_fn : silu_fn<T> {};
template <class T>
struct gelu_and_mul_fn : gelu_fn<T> {};
template <class T>
struct gelu_tanh_and_mul_fn : gelu_tanh_fn<T> {};

template <class Act, class T>
__device__ __forceinline__ void run(const ak_gated_params& p) {
  using V = Vec<T>;
  const Act act;
  const int64_t col0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const T* gate = static_cast<const T*>(p.x) + row * p.x_row_stride;
    const T* up = gate + p.d;
    T* out = static_cast<T*>(p.out) + row * p.out_row_stride;
    const int64_t nvec = aligned16(gate, up, out) ? p.d / V::kSize : 0;
    for (int64_t i = col0; i < nvec; i += col_step * kUnroll) {
      V g[kUnroll], u[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t j = i + k * col_step;
        if (j < nvec) {
          g[k] = load_vec(gate + j * V::kSize);
          u[k] = load_vec(up + j * V::kSize);
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t j = i + k * col_step;
        if (j < nvec) {
#pragma unroll
          for (int e = 0; e < V::kSize; ++e) {
            g[k].v[e] = from_f32<T>(act(to_f32(g[k].v[e])) * to_f32(u[k].v[e]));
          }
          store_vec(out + j * V::kSize, g[k]);
        }
      }
    }
    for (int64_t j = nvec * V::kSize + col0; j < p.d; j += col_step) {
      out[j] = from_f32<T>(act(to_f32(gate[j])) * to_f32(up[j]));
    }
  }
}

}  // namespace ak::gated

#define AK_ENTRY(symbol, op, T)                                        \
  extern "C" __global__ void __launch_bounds__(ak::gated::kMaxThreads) \
      symbol(const __grid_constant__ ak_gated_params p) {              \
    ak::gated::run<ak::gated::op##_fn<T>, T>(p);                       \
  }
