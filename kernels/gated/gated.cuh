// Gated activations out[r, :d] = act(x[r, :d]) * x[r, d:2d] over rows with row strides, and
// their backward ops: from x [rows, 2d] (gate | up) and dy [rows, d] (the gradient of out),
//   out[r, :d]   = dgate = dy * up * act'(gate)
//   out[r, d:2d] = dup   = dy * act(gate)
// with act and act' from ak/activations.cuh, f32 math, one rounding each.
//
// Same launch shape as the activation family: a 2-D block over (d, rows), grid-stride in both.
// A row takes the vector path when its gate, up and out pointers are all 16-byte aligned
// (so d must be a multiple of the vector width); the rest is scalar. 64-bit indices.
#pragma once

#include "ak/activations.cuh"
#include "ak/dtype.cuh"

namespace ak::gated {

// kMaxThreads and kUnroll come from [families.gated.constants] (gated_params.h, generated from
// arch_matrix.toml; the op layer reads the same values).

template <class T>
struct silu_and_mul_fn : silu_fn<T> {};
template <class T>
struct gelu_and_mul_fn : gelu_fn<T> {};
template <class T>
struct gelu_tanh_and_mul_fn : gelu_tanh_fn<T> {};

// Backward ops: vg(gate) gives (act(gate), act'(gate)).
template <class T>
struct silu_and_mul_backward_fn {
  static constexpr bool kBackward = true;
  __device__ __forceinline__ ValueGrad vg(float g) const { return silu_vg<T>(g); }
};
template <class T>
struct gelu_and_mul_backward_fn {
  static constexpr bool kBackward = true;
  __device__ __forceinline__ ValueGrad vg(float g) const { return gelu_vg<T>(g); }
};
template <class T>
struct gelu_tanh_and_mul_backward_fn {
  static constexpr bool kBackward = true;
  __device__ __forceinline__ ValueGrad vg(float g) const { return gelu_tanh_vg<T>(g); }
};

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

// dgate and dup of one element; dgate multiplies dy * up first, as the chain rule reads.
template <class Act>
__device__ __forceinline__ void grad(const Act& act, float g, float u, float dy, float& dg,
                                     float& du) {
  const ValueGrad a = act.vg(g);
  dg = dy * u * a.d;
  du = dy * a.v;
}

// Backward: three input rows (gate, up, dy) and two output rows (dgate, dup), same walk.
template <class Act, class T>
__device__ __forceinline__ void run_backward(const ak_gated_params& p) {
  using V = Vec<T>;
  const Act act;
  const int64_t col0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const T* gate = static_cast<const T*>(p.x) + row * p.x_row_stride;
    const T* up = gate + p.d;
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_row_stride;
    T* dgate = static_cast<T*>(p.out) + row * p.out_row_stride;
    T* dup = dgate + p.d;
    const int64_t nvec = aligned16(gate, up, dy, dgate, dup) ? p.d / V::kSize : 0;
    for (int64_t i = col0; i < nvec; i += col_step * kUnroll) {
      V g[kUnroll], u[kUnroll], d[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t j = i + k * col_step;
        if (j < nvec) {
          g[k] = load_vec(gate + j * V::kSize);
          u[k] = load_vec(up + j * V::kSize);
          d[k] = load_vec(dy + j * V::kSize);
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t j = i + k * col_step;
        if (j < nvec) {
#pragma unroll
          for (int e = 0; e < V::kSize; ++e) {
            float dg, du;
            grad(act, to_f32(g[k].v[e]), to_f32(u[k].v[e]), to_f32(d[k].v[e]), dg, du);
            g[k].v[e] = from_f32<T>(dg);
            u[k].v[e] = from_f32<T>(du);
          }
          store_vec(dgate + j * V::kSize, g[k]);
          store_vec(dup + j * V::kSize, u[k]);
        }
      }
    }
    for (int64_t j = nvec * V::kSize + col0; j < p.d; j += col_step) {
      float dg, du;
      grad(act, to_f32(gate[j]), to_f32(up[j]), to_f32(dy[j]), dg, du);
      dgate[j] = from_f32<T>(dg);
      dup[j] = from_f32<T>(du);
    }
  }
}

template <class Act, class T>
__device__ __forceinline__ void entry(const ak_gated_params& p) {
  if constexpr (kIsBackward<Act>) {
    run_backward<Act, T>(p);
  } else {
    run<Act, T>(p);
  }
}

}  // namespace ak::gated

#define AK_ENTRY(symbol, op, T)                                        \
  extern "C" __global__ void __launch_bounds__(ak::gated::kMaxThreads) \
      symbol(const __grid_constant__ ak_gated_params p) {              \
    ak::gated::entry<ak::gated::op##_fn<T>, T>(p);                     \
  }
