// Gated activations out[r, :d] = act(x[r, :d]) * x[r, d:2d] over rows with row strides, and
// their backward ops: from x [rows, 2d] (gate | up) and dy [rows, d] (the gradient of out),
//   out[r, :d]   = dgate = dy * up * act'(gate)
//   out[r, d:2d] = dup   = dy * act(gate)
// with act and act' from ak/activations.cuh, f32 math, one rounding each.
//
// Same walk as the activation family (ak/elementwise.cuh) over (d, rows): a row takes the vector
// path when its gate, up and out pointers are all 16-byte aligned (so d must be a multiple of the
// vector width); the rest is scalar.
#pragma once

#include "ak/activations.cuh"
#include "ak/elementwise.cuh"

namespace ak::gated {

// kMaxThreads and kUnroll come from [families.gated.constants] (gated_params.h, generated from
// arch_matrix.toml; the op layer reads the same values).

// Each op is its activation's functor: act(gate) forward, act's (value, derivative) backward.
template <class T>
using silu_and_mul_fn = silu_fn<T>;
template <class T>
using silu_and_mul_backward_fn = backward_fn<silu_vg<T>>;
template <class T>
using gelu_and_mul_fn = gelu_fn<T>;
template <class T>
using gelu_and_mul_backward_fn = backward_fn<gelu_vg<T>>;
template <class T>
using gelu_tanh_and_mul_fn = gelu_tanh_fn<T>;
template <class T>
using gelu_tanh_and_mul_backward_fn = backward_fn<gelu_tanh_vg<T>>;

template <class Act, class T>
__device__ __forceinline__ void entry(const ak_gated_params& p) {
  const Act act;
  if constexpr (kIsBackward<Act>) {  // three input rows (gate, up, dy), two outputs (dgate, dup)
    using Row = elementwise::Row<T, 3, 2>;
    elementwise::run<kUnroll>(
        p.rows, p.d,
        [&](int64_t r) {
          const T* gate = static_cast<const T*>(p.x) + r * p.x_row_stride;
          T* dgate = static_cast<T*>(p.out) + r * p.out_row_stride;
          return Row{{gate, gate + p.d, static_cast<const T*>(p.dy) + r * p.dy_row_stride},
                     {dgate, dgate + p.d}};
        },
        [=](const float (&x)[3], float (&y)[2]) {
          // dgate multiplies dy * up first, as the chain rule reads.
          const ValueGrad a = act.vg(x[0]);
          y[0] = x[2] * x[1] * a.d;
          y[1] = x[2] * a.v;
        });
  } else {
    using Row = elementwise::Row<T, 2, 1>;
    elementwise::run<kUnroll>(
        p.rows, p.d,
        [&](int64_t r) {
          const T* gate = static_cast<const T*>(p.x) + r * p.x_row_stride;
          return Row{{gate, gate + p.d}, {static_cast<T*>(p.out) + r * p.out_row_stride}};
        },
        [=](const float (&x)[2], float (&y)[1]) { y[0] = act(x[0]) * x[1]; });
  }
}

}  // namespace ak::gated

#define AK_ENTRY(symbol, op, T)                                        \
  extern "C" __global__ void __launch_bounds__(ak::gated::kMaxThreads) \
      symbol(const __grid_constant__ ak_gated_params p) {              \
    ak::gated::entry<ak::gated::op##_fn<T>, T>(p);                     \
  }
