// fp8 outputs: the norms and silu_and_mul with the quantization of the next GEMM's input fused
// into their store, and the standalone quantizer. Each op computes y in f32 exactly as its
// bf16/f16/f32 family does (norm.cuh, gated.cuh) but never rounds y to the input dtype: it is
// converted once,
//   q = cvt.rn.satfinite(y * (1 / scale))
// round to nearest even, saturating to the largest finite fp8 (+-448 e4m3, +-57344 e5m2; inf
// too), NaN stays NaN: torch's y.div(scale).clamp(-max, max).to(float8) up to the one f32 ulp
// between y * (1 / scale) and y / scale (vLLM multiplies by the inverse the same way).
// Scales (`mode`, see arch_matrix.toml): static (given), dynamic per row (max |y| of the row over
// the fp8 max, amax floored at 1e-10 so that a zero row gets a finite scale), per tensor (four
// launches on the one-element scale output: zero it, atomicMax the row maxima into it, quantize
// with the scale derived from it, turn it into that scale) and per 1 x group_size group (rows
// of `hidden` = group_size elements with a two-level index). A row's max |y| costs one more pass
// over its registers (or one more streamed read of a long row) before the store.
#pragma once

#include "ak/activations.cuh"
#include "ak/norms.cuh"

namespace ak::quant {

// kE5m2 (its flag bit beside the shared weight/bias/Gemma bits of ak/norms.cuh), the Mode
// enum, kMinAmax and kFp8MaxE4m3 / kFp8MaxE5m2 come from [families.quant.constants] and
// [constants.norms] (quant_params.h, generated from arch_matrix.toml).

__device__ __forceinline__ float fp8_max(bool e5m2) { return e5m2 ? kFp8MaxE5m2 : kFp8MaxE4m3; }
__device__ __forceinline__ float scale_of(float amax, bool e5m2) {
  return fmaxf(amax, kMinAmax) / fp8_max(e5m2);
}

// f32 -> fp8 with the scale applied, element j in the low byte.
struct Fp8 {
  float inv;
  bool e5m2;

  __device__ __forceinline__ uint32_t pack2(float lo, float hi) const {
    unsigned short r;
    const float a = hi * inv, b = lo * inv;  // cvt puts its first source in the upper byte
    if (e5m2) {
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(a), "f"(b));
    } else {
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(a), "f"(b));
    }
    return r;
  }
  __device__ __forceinline__ uint32_t pack4(float y0, float y1, float y2, float y3) const {
    return pack2(y0, y1) | (pack2(y2, y3) << 16);
  }
  __device__ __forceinline__ uint8_t one(float y) const { return uint8_t(pack2(y, 0.f)); }
};

// y producers: prepare(row, eps) runs the op's reductions and returns y = f(x, w, b).
struct quantize_y {
  static constexpr bool kAddResidual = false, kRowWeight = false, kTwoLevel = true;
  template <class Row>
  __device__ __forceinline__ static auto prepare(Row&, float) {
    return [](float x, float, float) { return x; };
  }
};

struct rms_norm_y : norms::rms_norm_y {
  static constexpr bool kAddResidual = false, kRowWeight = false, kTwoLevel = false;
};

// residual = round(x + residual) is written as by the norm family; y normalizes that value.
struct fused_add_rms_norm_y : rms_norm_y {
  static constexpr bool kAddResidual = true;
};

struct layer_norm_y : norms::layer_norm_y {
  static constexpr bool kAddResidual = false, kRowWeight = false, kTwoLevel = false;
};

// x is the gate half of the row; the up half (x + d, d = `hidden`) is read through the weight
// slot at x's row offset.
template <class T>
struct silu_and_mul_y {
  static constexpr bool kAddResidual = false, kRowWeight = true, kTwoLevel = false;
  template <class Row>
  __device__ __forceinline__ static auto prepare(Row&, float) {
    return [](float g, float up, float) { return silu_fn<T>()(g) * up; };
  }
};

template <class Y_>
struct quant_fn {
  using Y = Y_;
  static constexpr bool kAddResidual = Y::kAddResidual;

  template <class Row>
  __device__ __forceinline__ void operator()(Row& r, float eps) const {
    const auto f = Y::prepare(r, eps);
    const auto& row = r.row();
    const auto& a = row.a;
    const bool e5m2 = a.e5m2();
    const int mode = a.mode();  // uniform over the launch: every thread meets the same barriers
    float s;
    if (mode == kStatic) {
      s = __ldg(a.scale());
    } else if (mode == kFromAmax) {
      s = scale_of(*a.scale(), e5m2);
    } else {
      float acc[rowwise::kLanes] = {};
      r.for_each_y(f, [&](float y, int lane) { acc[lane] = fmaxf(acc[lane], fabsf(y)); });
      float v[1] = {fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3]))};
      r.template group<Max<1>>(v);
      const bool leader = row.active() && threadIdx.x == 0;
      if (mode == kAmax) {
        // Non-negative floats order as their bit patterns.
        if (leader) atomicMax(reinterpret_cast<unsigned*>(a.scale()), __float_as_uint(v[0]));
        return;
      }
      s = scale_of(v[0], e5m2);
      if (leader) a.scale_out()[row.index()] = s;
    }
    r.store_q(f, Fp8{__frcp_rn(s), e5m2});
  }
};

template <class T>
struct rms_norm_fn : quant_fn<rms_norm_y> {};
template <class T>
struct fused_add_rms_norm_fn : quant_fn<fused_add_rms_norm_y> {};
template <class T>
struct layer_norm_fn : quant_fn<layer_norm_y> {};
template <class T>
struct silu_and_mul_fn : quant_fn<silu_and_mul_y<T>> {};
template <class T>
struct quantize_fn : quant_fn<quantize_y> {};

// The row adapter of ak/reduce.cuh over this family's parameters (read in place), with the
// scales, the fp8 format and silu_and_mul's up half as a per-row weight.
template <class T, class Y>
struct Rows : norms::ParamRows<T, ak_quant_params, uint8_t, Y::kAddResidual, Y::kTwoLevel> {
  using Base = norms::ParamRows<T, ak_quant_params, uint8_t, Y::kAddResidual, Y::kTwoLevel>;
  static constexpr bool kRowWeight = Y::kRowWeight;
  __device__ __forceinline__ const T* weight() const {
    if constexpr (kRowWeight) return this->x() + this->p.hidden;
    return Base::weight();
  }
  // The 1 x group_size groups of quantize: the last group of a row may be shorter.
  __device__ __forceinline__ int64_t row_cols(int64_t lo) const {
    return (this->inner() > 1 && lo == this->p.inner - 1) ? this->p.tail : this->p.hidden;
  }
  __device__ __forceinline__ bool e5m2() const { return this->p.flags & kE5m2; }
  __device__ __forceinline__ int mode() const { return this->p.mode; }
  __device__ __forceinline__ float* scale() const { return static_cast<float*>(this->p.scale); }
  __device__ __forceinline__ float* scale_out() const {
    return static_cast<float*>(this->p.scale_out);
  }
};

template <class Op, class T>
__device__ __forceinline__ void run(const ak_quant_params& p) {
  if (p.mode == kZero || p.mode == kFinal) {  // the per-tensor amax, before and after
    if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
      float* s = static_cast<float*>(p.scale);
      *s = p.mode == kZero ? 0.f : scale_of(*s, p.flags & kE5m2);
    }
    return;
  }
  rowwise::run<Op>(Rows<T, typename Op::Y>{{p}}, p.vecs_per_thread, p.eps);
}

}  // namespace ak::quant

#define AK_ENTRY(symbol, op, T)                                          \
  extern "C" __global__ void __launch_bounds__(ak::rowwise::kMaxThreads) \
      symbol(const __grid_constant__ ak_quant_params p) {                \
    ak::quant::run<ak::quant::op##_fn<T>, T>(p);                         \
  }
