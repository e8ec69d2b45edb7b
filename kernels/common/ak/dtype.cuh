// Storage types, conversion to and from the f32 compute type, and 16-byte vector access.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace ak {

// Every family computes in f32 and rounds once on store: one rounding, as torch's opmath does.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A 16-byte packet of T: the widest single load/store a thread can issue.
template <class T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Plain cached 16-byte accesses. Streaming hints (__ldcs / __stcs) measured slower on an H200:
// bf16 silu_and_mul at 16384 x 8192 fell from 4.18 to 3.86 TB/s.
template <class T>
__device__ __forceinline__ Vec<T> load_vec(const T* p) {
  Vec<T> r;
  *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
  return r;
}

template <class T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T>& r) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);
}

// True when every pointer is 16-byte aligned, so a row can take the vector path.
template <class... P>
__device__ __forceinline__ bool aligned16(const P*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) | ...) & 15u) == 0;
}

// Whether an op's functor is a backward op (declares kBackward = true); the forward functors
// declare nothing, so each family's entry template picks the forward or backward walk at compile
// time.
template <class Op, class = void>
inline constexpr bool kIsBackward = false;
template <class Op>
inline constexpr bool kIsBackward<Op, std::void_t<decltype(Op::kBackward)>> = Op::kBackward;

}  // namespace ak
