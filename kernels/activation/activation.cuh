// Elementwise activations out = f(x) over a [rows, cols] view with row strides, and their
// backward ops out = dx = dy * f'(x) (x the forward's input, dy the gradient of f(x); the
// formulas are in ak/activations.cuh), which read dy with its own row stride.
//
// The runtime collapses any rank to rows x cols (one row when the tensor is contiguous); cols are
// contiguous. The walk over them (a 2-D block over (cols, rows), 16-byte packets on aligned rows,
// scalar tails, 64-bit indices) is ak/elementwise.cuh's.
#pragma once

#include "ak/activations.cuh"
#include "ak/elementwise.cuh"

namespace ak::activation {

// kMaxThreads, kUnroll and kUnrollBackward come from [families.activation.constants]
// (activation_params.h, generated from arch_matrix.toml; the op layer reads the same values).

template <class Op, class T>
__device__ __forceinline__ void entry(const ak_activation_params& p) {
  const Op op;
  if constexpr (kIsBackward<Op>) {  // out = op(x, dy)
    using Row = elementwise::Row<T, 2, 1>;
    elementwise::run<kUnrollBackward>(
        p.rows, p.cols,
        [&](int64_t r) {
          return Row{{static_cast<const T*>(p.x) + r * p.x_row_stride,
                      static_cast<const T*>(p.dy) + r * p.dy_row_stride},
                     {static_cast<T*>(p.out) + r * p.out_row_stride}};
        },
        [=](const float (&x)[2], float (&y)[1]) { y[0] = op(x[0], x[1]); });
  } else {
    using Row = elementwise::Row<T, 1, 1>;
    elementwise::run<kUnroll>(
        p.rows, p.cols,
        [&](int64_t r) {
          return Row{{static_cast<const T*>(p.x) + r * p.x_row_stride},
                     {static_cast<T*>(p.out) + r * p.out_row_stride}};
        },
        [=](const float (&x)[1], float (&y)[1]) { y[0] = op(x[0]); });
  }
}

}  // namespace ak::activation

#define AK_ENTRY(symbol, op, T)                                             \
  extern "C" __global__ void __launch_bounds__(ak::activation::kMaxThreads) \
      symbol(const __grid_constant__ ak_activation_params p) {              \
    ak::activation::entry<ak::op##_fn<T>, T>(p);                            \
  }
