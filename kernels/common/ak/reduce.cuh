// Row-wise reductions shared by the norm and softmax families.
//
// A row of `cols` contiguous elements is owned by a *row group* of G threads laid along
// threadIdx.x (G = blockDim.x: a power of two <= 32, or a multiple of 32 <= 1024); threadIdx.y
// stacks row groups, so a block works on blockDim.y rows at a time; blocks grid-stride over rows.
// Each thread owns *slots*: 16-byte packets of V = 16 / sizeof(T) elements. In the vector layout
// slot (u, j) of the chunk at element c0 is element c0 + (u * G + t) * V + j and moves with one
// 16-byte access; in the scalar layout (odd sizes, misaligned rows) it is element
// c0 + (u * V + j) * G + t, so a warp's scalar accesses stay coalesced. Every pass over a row uses
// the same mapping, so a thread only ever reads back elements it wrote itself.
//
// Two engines give an op the same calls: `for_each(f)` (f(x, lane) over the thread's elements
// of the row), `group<Combine>(v)` (combine a few floats over the row group), `store(f)` and
// `cols()`:
//   RegRow<A, N, ...>   the row lives in registers (N packets per thread, N in {1, 2, 4, 8}):
//                       global memory is read once and written once per element;
//   StreamRow<A, ...>   rows longer than registers hold: each `for_each` and the `store` stream
//                       the row from global memory again.
// An op (a functor of its family) is written once against that interface and runs on both: it
// folds its elements per thread first (no barrier), then combines one small state per thread
// (a sum; mean and M2; max and sum of exponentials) with a single group reduction. Reductions
// are fixed-order trees (per-thread lanes, warp shuffles, then one shared-memory step), so
// results are bitwise repeatable. The backward ops read a second row (dy) through two more
// engines, GradRow and GradStreamRow, at the end of this file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ak/dtype.cuh"

namespace ak {

// Combines for GroupReducer: a <- a (+) b, where a is the value of the lower lane.
template <int K>
struct Sum {
  static constexpr bool kCommutative = true;  // bitwise: IEEE addition is commutative
  __device__ __forceinline__ static void identity(float (&v)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = 0.f;
  }
  __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) a[k] += b[k];
  }
};

// Max of non-negative values (|y| for the fp8 scales); fmaxf drops NaN, so a NaN element does
// not poison its row's scale (it stays NaN through the conversion).
template <int K>
struct Max {
  static constexpr bool kCommutative = true;
  __device__ __forceinline__ static void identity(float (&v)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = 0.f;
  }
  __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) a[k] = fmaxf(a[k], b[k]);
  }
};

// Reduces K floats per thread over its row group with `Combine`. Every thread of the block must
// call it the same number of times (row groups of G > 32 meet at a __syncthreads). Two shared
// buffers alternate, so a warp that races ahead into the next reduction cannot overwrite
// partials that a slower warp has yet to read (the barrier of the reduction in between orders
// them). Each butterfly step combines (lower lane, upper lane) in that order on both lanes, so
// every thread of the group ends with bitwise the same result even for a combine that is not
// commutative in floating point.
class GroupReducer {
 public:
  static constexpr int kMaxValues = 3;
  using Buffer = float[2][kMaxValues][32];

  __device__ explicit GroupReducer(Buffer& smem) : smem_(smem) {}

  template <class Combine, int K>
  __device__ __forceinline__ void reduce(float (&v)[K]) {
    static_assert(K <= kMaxValues, "GroupReducer: too many values");
    const int g = blockDim.x;
    const int tid = threadIdx.y * g + threadIdx.x;
    const int lane = tid & 31;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      if (o < g) step<Combine>(v, o, lane);
    }
    if (g <= 32) return;
    float (*buf)[32] = smem_[phase_ & 1];
    ++phase_;
    const int warp = tid >> 5;
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) buf[k][warp] = v[k];
    }
    __syncthreads();
    const int first = warp - (threadIdx.x >> 5);  // first warp of this row group
    if (lane < (g >> 5)) {
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = buf[k][first + lane];
    } else {
      Combine::identity(v);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) step<Combine>(v, o, lane);
  }

 private:
  template <class Combine, int K>
  __device__ __forceinline__ static void step(float (&v)[K], int o, int lane) {
    if constexpr (Combine::kCommutative) {
      float w[K];
#pragma unroll
      for (int k = 0; k < K; ++k) w[k] = __shfl_xor_sync(0xffffffffu, v[k], o);
      Combine()(v, w);
      return;
    }
    // Selects, not a branch: the two halves of a warp would otherwise run the combine in turn.
    const bool upper = lane & o;
    float lo[K], hi[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float w = __shfl_xor_sync(0xffffffffu, v[k], o);
      lo[k] = upper ? w : v[k];
      hi[k] = upper ? v[k] : w;
    }
    Combine()(lo, hi);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = lo[k];
  }

  Buffer& smem_;
  int phase_ = 0;
};

// 2^x with the MUFU.EX2 instruction alone (inputs here are <= 0; results below 2^-126 flush to
// 0, far under every tolerance).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

namespace rowwise {

// kMaxThreads (the largest row group) comes from [constants.rowwise] in every family's generated
// params header, included before this file.
constexpr int kStreamChunk = 4;  // packets in flight per thread and pass in StreamRow
constexpr int kLanes = 4;        // independent accumulators per thread in a reduction

// An empty asm that claims to change `v`: values derived from it (f32 conversions, slot offsets)
// cannot be kept live from one pass to the next and are recomputed instead. Without it the
// compiler holds every converted element and every address across the reductions: twice the
// registers of the packed row, and spills.
__device__ __forceinline__ void launder(uint32_t& v) { asm volatile("" : "+r"(v)); }
__device__ __forceinline__ int launder(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// 16 bytes of storage of T in four 32-bit registers, with f32 access to its elements.
template <class T>
struct Packet {
  static constexpr int V = 16 / sizeof(T);
  using Bits = std::conditional_t<sizeof(T) == 2, unsigned short, unsigned int>;
  uint32_t w[4];

  __device__ __forceinline__ float get(int j) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(w[j]);
    } else {
      const uint32_t word = w[j >> 1];
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __uint_as_float((j & 1) ? (word & 0xffff0000u) : (word << 16));
      } else {
        return __half2float(__ushort_as_half(
            static_cast<unsigned short>((j & 1) ? (word >> 16) : (word & 0xffffu))));
      }
    }
  }

  // Elements j and j + 1 (j even) from f32, each rounded once to nearest even (one cvt for a
  // bf16/f16 pair on sm_80+; going through __nv_bfloat162_raw instead put the halves through
  // local memory).
  __device__ __forceinline__ void set2(int j, float lo, float hi) {
    if constexpr (sizeof(T) == 4) {
      w[j] = __float_as_uint(lo);
      w[j + 1] = __float_as_uint(hi);
    } else {
      w[j >> 1] = pack2(lo, hi);
    }
  }

  __device__ __forceinline__ static uint32_t pack2(float lo, float hi) {
    uint32_t u;
#if __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    } else {
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    }
#else
    u = uint32_t(to_bits(lo)) | (uint32_t(to_bits(hi)) << 16);
#endif
    return u;
  }

  __device__ __forceinline__ static unsigned short to_bits(float v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    } else {
      return __half_as_ushort(__float2half_rn(v));
    }
  }

  __device__ __forceinline__ Bits bits(int j) const {
    if constexpr (sizeof(T) == 4) {
      return w[j];
    } else {
      return static_cast<Bits>((j & 1) ? (w[j >> 1] >> 16) : (w[j >> 1] & 0xffffu));
    }
  }
  __device__ __forceinline__ void set_bits(int j, Bits b) {
    if constexpr (sizeof(T) == 4) {
      w[j] = b;
    } else if (j & 1) {
      w[j >> 1] = (w[j >> 1] & 0xffffu) | (uint32_t(b) << 16);
    } else {
      w[j >> 1] = (w[j >> 1] & 0xffff0000u) | b;
    }
  }

  // Every element = v (exact for the 1 and 0 used here).
  __device__ __forceinline__ static Packet fill(float v) {
    Packet p;
#pragma unroll
    for (int j = 0; j < V; j += 2) p.set2(j, v, v);
    return p;
  }

  __device__ __forceinline__ void launder() {
#pragma unroll
    for (int i = 0; i < 4; ++i) rowwise::launder(w[i]);
  }
};

// A family passes its parameters through an adapter A (ak/norms.cuh, softmax.cuh) with
//   using T = <storage type>;  O* out() (O: T, or a 1-byte fp8 output); const T* x();
//   T* residual(); const T* weight(); const T* bias() (each may be null except out and x);
//   int64_t rows(), cols(), x_stride(), out_stride(), res_stride() (strides in elements, may be
//   negative), and from OneLevel (or its own): inner(), x_outer(), out_outer(), res_outer(),
//   row_cols(lo), kRowWeight.
// Rows have a two-level index: with inner() > 1, row r is (hi, lo) = (r / inner, r % inner) at
// element hi * outer + lo * stride (q or k of a fused QKV buffer viewed [tokens, heads, dim]:
// independent token and head strides; 1x128 groups of a [M, K] row); otherwise r * stride.
// The adapter reads the __grid_constant__ parameter struct in place, so the engines re-read
// fields from the constant bank where they need them instead of holding ~20 registers of
// pointers and strides for the whole kernel.

// Defaults of the adapter interface for families whose rows have one level.
struct OneLevel {
  // The weight is a per-column vector shared by all rows (true: it lives in each row of x,
  // at x's row offset, as the up half of a gated activation).
  static constexpr bool kRowWeight = false;
  __device__ __forceinline__ static constexpr int64_t inner() { return 0; }
  __device__ __forceinline__ static constexpr int64_t x_outer() { return 0; }
  __device__ __forceinline__ static constexpr int64_t out_outer() { return 0; }
  __device__ __forceinline__ static constexpr int64_t res_outer() { return 0; }
};

// Decided once per launch, so that every row group of a block takes the same path.
template <class A>
__device__ __forceinline__ bool vectorizable(const A& a) {
  constexpr int V = 16 / sizeof(typename A::T);
  bool ok = a.cols() % V == 0 && a.row_cols(a.inner() - 1) % V == 0 &&
            aligned16(a.out(), a.x(), a.residual(), a.weight(), a.bias());
  if (a.rows() > 1) {
    ok = ok && a.x_stride() % V == 0 && a.out_stride() % V == 0 && a.res_stride() % V == 0;
    if (a.inner() > 1) {
      ok = ok && a.x_outer() % V == 0 && a.out_outer() % V == 0 && a.res_outer() % V == 0;
    }
  }
  return ok;
}

// One row of a launch: pointers computed where they are used. r < 0 is a padding row (nothing
// is read or written; see each_row). Only r is held: a two-level row recomputes its (hi, lo)
// split where an offset is needed (the resident row needs those registers more).
template <class A>
struct Row {
  using T = typename A::T;
  const A& a;
  int64_t r;

  __device__ __forceinline__ bool active() const { return r >= 0; }
  __device__ __forceinline__ int64_t index() const { return r; }
  // Element offset of this row in an array with the given row and outer strides.
  __device__ __forceinline__ int64_t off(int64_t stride, int64_t outer) const {
    const int64_t in = a.inner();
    if (in <= 1) return r * stride;
    int64_t hi;
    if (((uint64_t(r) | uint64_t(in)) >> 32) == 0) {  // 32-bit division: ~20 instructions
      hi = int64_t(uint32_t(r) / uint32_t(in));
    } else {
      hi = r / in;
    }
    return hi * outer + (r - hi * in) * stride;
  }
  __device__ __forceinline__ int64_t lo() const {
    const int64_t in = a.inner();
    return in <= 1 ? r : r % in;
  }
  __device__ __forceinline__ const T* x() const { return a.x() + off(a.x_stride(), a.x_outer()); }
  __device__ __forceinline__ T* residual() const {
    return a.residual() + off(a.res_stride(), a.res_outer());
  }
  __device__ __forceinline__ auto out() const {
    return a.out() + off(a.out_stride(), a.out_outer());
  }
  __device__ __forceinline__ const T* weight() const {
    const T* w = a.weight();
    if constexpr (A::kRowWeight) {
      return w + off(a.x_stride(), a.x_outer());
    } else {
      return w;
    }
  }
  __device__ __forceinline__ int64_t cols() const { return a.row_cols(lo()); }
  __device__ __forceinline__ const T* dy() const { return a.dy() + off(a.dy_stride(), 0); }
};

// One chunk of K slots per thread at a given row offset. Which slots are valid is one number,
// `count`: the valid slots of a thread are a prefix (packets u < count in the vector layout,
// elements s = u * V + j < count in the scalar one), so a resident row carries one register of
// bounds. Offsets inside a chunk are 32-bit (K * V * G <= 65536); each call recomputes them from
// laundered (t, g), so no address is held from one pass to the next.
template <class T, int K, bool kVec>
struct Slots {
  using P = Packet<T>;
  using Bits = typename P::Bits;
  static constexpr int V = P::V;
  static constexpr int kUnits = kVec ? K : K * V;  // slots tested one by one
  int t, g;

  // Elements of a chunk: K packets of each thread of the row group; of those, the ones left in a
  // row of n elements from c0 (at most a chunk, so the count fits an int).
  __device__ __forceinline__ int64_t chunk() const { return int64_t(K) * V * g; }
  __device__ __forceinline__ int left(int64_t n, int64_t c0) const {
    const int64_t r = n - c0;
    return int(r < chunk() ? r : chunk());
  }

  // The calling thread's: thread t of a row group of g = blockDim.x.
  __device__ __forceinline__ static Slots thread() {
    return Slots{int(threadIdx.x), int(blockDim.x)};
  }

  // Valid slots of thread t among `units` when n elements (maybe <= 0) remain from the chunk's
  // start: vector slot u holds element (u * g + t) * V, scalar slot s element s * g + t.
  template <int kCountUnits = kUnits>
  __device__ __forceinline__ int count(int n) const {
    const int rem = (kVec ? n / V : n) - t;  // vector layout: n % V == 0
    int c = 0;
#pragma unroll
    for (int s = 0; s < kCountUnits; ++s) c += s * g < rem ? 1 : 0;
    return c;
  }

  struct Map {
    int t, g, count;
    __device__ __forceinline__ Map(int t_, int g_, int count_)
        : t(launder(t_)), g(launder(g_)), count(count_) {}
    __device__ __forceinline__ int off(int u, int j) const {
      return kVec ? (u * g + t) * V + j : (u * V + j) * g + t;
    }
    __device__ __forceinline__ bool ok(int u, int j) const {
      return (kVec ? u : u * V + j) < count;
    }
  };

  // Slot packet u of p into `out` (only the valid elements).
  template <bool kReadOnly>
  __device__ __forceinline__ static void load1(const T* p, const Map& m, int u, P& out) {
    if constexpr (kVec) {
      if (m.ok(u, 0)) {
        const uint4* q = reinterpret_cast<const uint4*>(p + m.off(u, 0));
        const uint4 r = kReadOnly ? __ldg(q) : *q;
        out.w[0] = r.x, out.w[1] = r.y, out.w[2] = r.z, out.w[3] = r.w;
      }
    } else {
      const Bits* q = reinterpret_cast<const Bits*>(p);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) out.set_bits(j, kReadOnly ? __ldg(q + m.off(u, j)) : q[m.off(u, j)]);
      }
    }
  }

  template <bool kReadOnly>
  __device__ __forceinline__ void load(const T* p, int count, P (&buf)[K]) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < K; ++u) load1<kReadOnly>(p, m, u, buf[u]);
  }

  // Packet p of slot u to `dst` (only the valid elements).
  __device__ __forceinline__ static void store1(T* dst, const Map& m, int u, const P& p) {
    if constexpr (kVec) {
      if (m.ok(u, 0)) {
        *reinterpret_cast<uint4*>(dst + m.off(u, 0)) = make_uint4(p.w[0], p.w[1], p.w[2], p.w[3]);
      }
    } else {
      Bits* q = reinterpret_cast<Bits*>(dst);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) q[m.off(u, j)] = p.bits(j);
      }
    }
  }

  __device__ __forceinline__ void store(T* p, int count, const P (&buf)[K]) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < K; ++u) store1(p, m, u, buf[u]);
  }

  // buf = round(buf + r): the residual add, rounded to the storage type as vLLM does.
  __device__ __forceinline__ static void add(P (&buf)[K], const P (&r)[K]) {
#pragma unroll
    for (int u = 0; u < K; ++u) {
#pragma unroll
      for (int j = 0; j < V; j += 2) {
        buf[u].set2(j, buf[u].get(j) + r[u].get(j), buf[u].get(j + 1) + r[u].get(j + 1));
      }
    }
  }

  // buf = f(buf, weight, bias) element by element, one rounding; absent weight/bias read as
  // 1 and 0 (exact, so the ops need no special case). Weight and bias are loaded H packets at a
  // time, which bounds the registers they take next to a resident row.
  template <int H = (K < 2 ? K : 2), class F>
  __device__ __forceinline__ void apply(P (&buf)[K], const T* w, const T* b, int count, F f) const {
#pragma unroll
    for (int h = 0; h < K; h += H) {
      P wp[H], bp[H];
      load_wb<H>(w, b, count, h, wp, bp);
#pragma unroll
      for (int u = 0; u < H; ++u) {
#pragma unroll
        for (int j = 0; j < V; j += 2) {
          P& x = buf[h + u];
          x.set2(j, f(x.get(j), wp[u].get(j), bp[u].get(j)),
                 f(x.get(j + 1), wp[u].get(j + 1), bp[u].get(j + 1)));
        }
      }
    }
  }

  // f(x, lane) for every valid element, lane = j % kLanes (independent accumulators).
  template <class F>
  __device__ __forceinline__ void visit(const P (&buf)[K], int count, F&& f) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < K; ++u) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) f(buf[u].get(j), j % kLanes);
      }
    }
  }

  // Weight and bias packets [h, h + H) of the chunk, absent ones read as 1 and 0.
  template <int H>
  __device__ __forceinline__ void load_wb(const T* w, const T* b, int count, int h, P (&wp)[H],
                                          P (&bp)[H]) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < H; ++u) {
      wp[u] = P::fill(1.f);
      bp[u] = P::fill(0.f);
      if (w) load1<true>(w, m, h + u, wp[u]);
      if (b) load1<true>(b, m, h + u, bp[u]);
    }
  }

  // f(u, wp, bp, m) for each packet u of the chunk with its weight and bias packets, loaded H at
  // a time (load_wb).
  template <int H, class F>
  __device__ __forceinline__ void each_wb(const T* w, const T* b, int count, F&& f) const {
#pragma unroll
    for (int h = 0; h < K; h += H) {
      P wp[H], bp[H];
      load_wb<H>(w, b, count, h, wp, bp);
      const Map m(t, g, count);
#pragma unroll
      for (int u = 0; u < H; ++u) f(h + u, wp[u], bp[u], m);
    }
  }

  // sink(f(x, weight, bias), lane) for every valid element, y in f32 (never rounded to T).
  template <int H, class F, class G>
  __device__ __forceinline__ void visit_y(const P (&buf)[K], const T* w, const T* b, int count, F f,
                                          G&& sink) const {
    each_wb<H>(w, b, count, [&](int u, const P& wp, const P& bp, const Map& m) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) sink(f(buf[u].get(j), wp.get(j), bp.get(j)), j % kLanes);
      }
    });
  }

  // Two-input rows (the backward ops). `w` (may be null: every weight reads 1) is the row's
  // weight vector, loaded one packet at a time next to the resident x and dy.
  //
  // f(x, dy, w, lane) for every valid element.
  template <class F>
  __device__ __forceinline__ void visit2(const P (&x)[K], const P (&dy)[K], const T* w, int count,
                                         F&& f) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      P wp = P::fill(1.f);
      if (w) load1<true>(w, m, u, wp);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) f(x[u].get(j), dy[u].get(j), wp.get(j), j % kLanes);
      }
    }
  }

  // out (1-byte elements) = q(f(x, weight, bias)), converted from f32 once. A packet's V
  // results pack into V bytes: one 4- or 8-byte store in the vector layout (out and its row
  // strides are then multiples of V), byte stores in the scalar one (coalesced across the warp).
  template <int H, class F, class Q>
  __device__ __forceinline__ void store_q(const P (&buf)[K], const T* w, const T* b, uint8_t* out,
                                          int count, F f, const Q& q) const {
    each_wb<H>(w, b, count, [&](int u, const P& wp, const P& bp, const Map& m) {
      const P& x = buf[u];
      if constexpr (kVec) {
        if (!m.ok(u, 0)) return;
        uint32_t word[V / 4];
#pragma unroll
        for (int j = 0; j < V; j += 4) {
          float y[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) y[i] = f(x.get(j + i), wp.get(j + i), bp.get(j + i));
          word[j / 4] = q.pack4(y[0], y[1], y[2], y[3]);
        }
        uint8_t* p = out + m.off(u, 0);
        if constexpr (V == 4) {
          *reinterpret_cast<uint32_t*>(p) = word[0];
        } else {
          *reinterpret_cast<uint2*>(p) = make_uint2(word[0], word[1]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (m.ok(u, j)) out[m.off(u, j)] = q.one(f(x.get(j), wp.get(j), bp.get(j)));
        }
      }
    });
  }

  // dst = f(x, dy, w) for every valid element, one rounding.
  template <class F>
  __device__ __forceinline__ void store2(T* dst, const P (&x)[K], const P (&dy)[K], const T* w,
                                         int count, F f) const {
    const Map m(t, g, count);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      P wp = P::fill(1.f);
      if (w) load1<true>(w, m, u, wp);
      P o;
#pragma unroll
      for (int j = 0; j < V; j += 2) {
        o.set2(j, f(x[u].get(j), dy[u].get(j), wp.get(j)),
               f(x[u].get(j + 1), dy[u].get(j + 1), wp.get(j + 1)));
      }
      store1(dst, m, u, o);
    }
  }
};

// What every engine shares: its row and the group reduction.
template <class A, class S>
class Engine {
 public:
  __device__ __forceinline__ float cols() const { return float(row_.a.cols()); }
  __device__ __forceinline__ const Row<A>& row() const { return row_; }

  template <class Combine, int K>
  __device__ __forceinline__ void group(float (&v)[K]) {
    red_.template reduce<Combine>(v);
  }

 protected:
  __device__ __forceinline__ Engine(const Row<A>& row, GroupReducer& red) : row_(row), red_(red) {}

  Row<A> row_;
  GroupReducer& red_;
};

// Packets per chunk of a streaming engine that reads kRowsRead rows per pass: kStreamChunk
// packets in flight per thread in the vector layout, 16 elements (each its own load and address)
// in the scalar one, shared among the rows.
template <class T, bool kVec, int kRowsRead>
constexpr int kStreamPackets = (kVec ? kStreamChunk : 16 / Packet<T>::V) / kRowsRead;

// Chunks of the register engine bound how many residual/weight/bias packets are live at once
// next to the row.
template <int N>
constexpr int kRegChunk = N < 4 ? N : (N == 8 ? 2 : 4);

// The row in registers: N packets per thread, read once, written once.
template <class A, int N, bool kVec, bool kAdd>
class RegRow : public Engine<A, Slots<typename A::T, kRegChunk<N>, kVec>> {
  using T = typename A::T;
  static constexpr int C = kRegChunk<N>;
  static constexpr int NC = N / C;
  using P = Packet<T>;
  static constexpr int V = P::V;
  using S = Slots<T, C, kVec>;
  using Base = Engine<A, S>;
  using Base::row_;
  static constexpr int kChunkUnits = S::kUnits;
  // Weight and bias packets loaded at a time: N = 8 leaves room for one of each.
  static constexpr int H = N == 8 ? 1 : C;

 public:
  __device__ __forceinline__ RegRow(const Row<A>& row, int64_t n, GroupReducer& red)
      : Base(row, red) {
    const S s = S::thread();
    count_ = s.template count<kChunkUnits * NC>(int(n));
    const T* x = row_.x();
    // Every x load is issued before the first use: N packets in flight per thread.
#pragma unroll
    for (int c = 0; c < NC; ++c) s.template load<true>(x + c0(s, c), cnt(c), v_[c]);
    if constexpr (kAdd) {
      T* res = row_.residual();
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        P r[C];
        // Coherent loads: this kernel writes the residual back.
        s.template load<false>(res + c0(s, c), cnt(c), r);
        S::add(v_[c], r);
        s.store(res + c0(s, c), cnt(c), v_[c]);
      }
    }
  }

  template <class F>
  __device__ __forceinline__ void for_each(F&& f) {
    const S s = S::thread();
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      launder(c);
      s.visit(v_[c], cnt(c), f);
    }
  }

  // out = f(x, weight, bias), one rounding.
  template <class F>
  __device__ __forceinline__ void store(F f) {
    each_chunk([&](const S& s, int c, int o, const T* w, const T* b, auto* out) {
      s.template apply<H>(v_[c], w, b, cnt(c), f);
      s.store(out + o, cnt(c), v_[c]);
    });
  }

  // sink(f(x, weight, bias), lane) over the thread's elements (f32, nothing stored).
  template <class F, class G>
  __device__ __forceinline__ void for_each_y(F f, G&& sink) {
    each_chunk([&](const S& s, int c, int, const T* w, const T* b, auto*) {
      s.template visit_y<H>(v_[c], w, b, cnt(c), f, sink);
    });
  }

  // 1-byte out = q(f(x, weight, bias)), one conversion from f32.
  template <class F, class Q>
  __device__ __forceinline__ void store_q(F f, const Q& q) {
    each_chunk([&](const S& s, int c, int o, const T* w, const T* b, uint8_t* out) {
      s.template store_q<H>(v_[c], w, b, out + o, cnt(c), f, q);
    });
  }

 private:
  __device__ __forceinline__ static int c0(const S& s, int c) { return c * C * V * s.g; }
  __device__ __forceinline__ int cnt(int c) const { return count_ - c * kChunkUnits; }

  // f(s, c, o, w, b, out) for each resident chunk c, laundered first, at element offset o of the
  // row: w / b point at the chunk's weight and bias (null when absent), out at the row's output.
  template <class F>
  __device__ __forceinline__ void each_chunk(F&& f) {
    const S s = S::thread();
    const T* w = row_.weight();
    const T* b = row_.a.bias();
    auto* out = row_.out();
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      launder(c);
      const int o = c0(s, c);
      f(s, c, o, w ? w + o : nullptr, b ? b + o : nullptr, out);
    }
  }

  // Resident chunk c anew for this pass (see rowwise::launder).
  __device__ __forceinline__ void launder(int c) {
#pragma unroll
    for (int u = 0; u < C; ++u) v_[c][u].launder();
  }

  int count_;  // valid slots of this thread over the whole row
  P v_[NC][C];
};

// The row streamed from global memory on every pass (half the chunk with a residual, which
// doubles the loads). With kAdd, the first pass writes residual = round(x + residual) and later
// passes read it back.
template <class A, int /*N: unused*/, bool kVec, bool kAdd>
class StreamRow
    : public Engine<
          A, Slots<typename A::T, kStreamPackets<typename A::T, kVec, (kAdd ? 2 : 1)>, kVec>> {
  using T = typename A::T;
  using P = Packet<T>;
  static constexpr int C = kStreamPackets<T, kVec, (kAdd ? 2 : 1)>;
  using S = Slots<T, C, kVec>;
  using Base = Engine<A, S>;
  using Base::row_;

 public:
  __device__ __forceinline__ StreamRow(const Row<A>& row, int64_t n, GroupReducer& red)
      : Base(row, red), n_(n) {}

  // One streamed pass over the row (the first also writes the residual sum, with kAdd).
  template <class F>
  __device__ __forceinline__ void for_each(F&& f) {
    each(
        [&](const S& s, int64_t, int cnt, auto& buf, const T*, const T*) { s.visit(buf, cnt, f); });
    first_ = false;
  }

  template <class F>
  __device__ __forceinline__ void store(F f) {
    each([&](const S& s, int64_t c0, int cnt, auto& buf, const T* w, const T* b) {
      s.apply(buf, w, b, cnt, f);
      s.store(row_.out() + c0, cnt, buf);
    });
  }

  template <class F, class G>
  __device__ __forceinline__ void for_each_y(F f, G&& sink) {
    each([&](const S& s, int64_t, int cnt, auto& buf, const T* w, const T* b) {
      s.template visit_y<1>(buf, w, b, cnt, f, sink);
    });
    first_ = false;
  }

  template <class F, class Q>
  __device__ __forceinline__ void store_q(F f, const Q& q) {
    each([&](const S& s, int64_t c0, int cnt, auto& buf, const T* w, const T* b) {
      s.template store_q<1>(buf, w, b, row_.out() + c0, cnt, f, q);
    });
  }

 private:
  // f(s, c0, cnt, buf, w, b) for each chunk: buf its x packets (x + residual with kAdd), w / b
  // its weight and bias (null when absent).
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    const S s = S::thread();
    for (int64_t c0 = 0; c0 < n_; c0 += s.chunk()) {
      P buf[C];
      const int cnt = s.count(s.left(n_, c0));
      fetch(s, c0, cnt, buf);
      const T* w = row_.weight();
      const T* b = row_.a.bias();
      f(s, c0, cnt, buf, w ? w + c0 : nullptr, b ? b + c0 : nullptr);
    }
  }

  __device__ __forceinline__ void fetch(const S& s, int64_t c0, int cnt, P (&buf)[C]) {
    if constexpr (kAdd) {
      T* res = row_.residual() + c0;
      if (!first_) {  // the residual now holds round(x + residual), written by this thread
        s.template load<false>(res, cnt, buf);
        return;
      }
      P r[C];
      s.template load<true>(row_.x() + c0, cnt, buf);
      s.template load<false>(res, cnt, r);
      S::add(buf, r);
      s.store(res, cnt, buf);
    } else {
      s.template load<true>(row_.x() + c0, cnt, buf);
    }
  }

  int64_t n_;
  bool first_ = true;
};

// sum over the row of f(x), through kLanes accumulators per thread and one group reduction.
template <class Row, class F>
__device__ __forceinline__ float row_sum(Row& r, F f) {
  float acc[kLanes] = {};
  r.for_each([&](float x, int lane) { acc[lane] += f(x); });
  float v[1] = {(acc[0] + acc[1]) + (acc[2] + acc[3])};
  r.template group<Sum<1>>(v);
  return v[0];
}

// Grid-stride over rows, blockDim.y rows per block at a time. The loop bound is uniform across
// the block (rows past the end are padding: n = 0, nothing read or written) so that every thread
// meets every barrier of the row group reductions.
template <class Op, template <class, int, bool, bool> class Engine, int N, bool kVec, class A>
__device__ __forceinline__ void each_row(const A& a, GroupReducer& red, float eps) {
  using R = Engine<A, N, kVec, Op::kAddResidual>;
  const Op op;
  const int64_t rows = a.rows();
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += step) {
    const int64_t row = base + threadIdx.y;
    const Row<A> rw{a, row < rows ? row : -1};
    R r(rw, rw.active() ? rw.cols() : 0, red);
    op(r, eps);
  }
}

// Entry of both families: `vecs_per_thread` (from the host's launch heuristic) picks the register
// engine's N, 0 the multi-pass engine. Rows that cannot take 16-byte accesses use the scalar
// layout with N = 4 (the host sizes the row group for it) or the multi-pass engine; the capacity
// check keeps any launch shape correct.
template <class Op, class A>
__device__ __forceinline__ void run(const A& a, int vecs_per_thread, float eps) {
  __shared__ GroupReducer::Buffer smem;
  GroupReducer red(smem);
  constexpr int V = 16 / sizeof(typename A::T);
  const int64_t per_packet = int64_t(V) * blockDim.x;
  if (vectorizable(a)) {
    switch (int64_t(vecs_per_thread) * per_packet >= a.cols() ? vecs_per_thread : 0) {
      case 1:
        return each_row<Op, RegRow, 1, true>(a, red, eps);
      case 2:
        return each_row<Op, RegRow, 2, true>(a, red, eps);
      case 4:
        return each_row<Op, RegRow, 4, true>(a, red, eps);
      case 8:
        // With a residual, 8 resident packets leave too few registers for the residual's loads
        // and stores (spills); those rows (> 16 K f32 / 32 K 16-bit elements) take two passes.
        if constexpr (Op::kAddResidual) {
          return each_row<Op, StreamRow, 0, true>(a, red, eps);
        } else {
          return each_row<Op, RegRow, 8, true>(a, red, eps);
        }
      default:
        return each_row<Op, StreamRow, 0, true>(a, red, eps);
    }
  }
  return each_row<Op, StreamRow, 0, false>(a, red, eps);
}

// --- Two-input rows: the backward ops ------------------------------------------------------
// A backward op reads two rows of the same shape, x (the forward's input, or its output for
// softmax) and dy (the gradient of the forward's output), and writes out = dx. Its adapter adds
//   const T* dy(); int64_t dy_stride();
// to the one above (residual() and bias() are not read). The engines give the same calls with
// both values: `for_each(f(x, dy, w, lane))`, `group`, `store(f(x, dy, w) -> dx)`, `cols()`;
// the register engine also has `for_each_slot(f(k, x, dy))`, which hands a backward op the
// index k in [0, kSlots) of each of its elements (the same column in every row a thread
// visits), so that it can fold per-column sums (dweight, dbias) over rows in registers, and
// `write_cols` to store them.

template <class A>
__device__ __forceinline__ bool vectorizable_grad(const A& a) {
  constexpr int V = 16 / sizeof(typename A::T);
  bool ok = a.cols() % V == 0 && aligned16(a.out(), a.x(), a.dy(), a.weight());
  if (a.rows() > 1) {
    ok = ok && a.x_stride() % V == 0 && a.out_stride() % V == 0 && a.dy_stride() % V == 0;
  }
  return ok;
}

// x and dy in registers: N packets of each per thread.
template <class A, int N, bool kVec>
class GradRow : public Engine<A, Slots<typename A::T, N, kVec>> {
  using T = typename A::T;
  using P = Packet<T>;
  static constexpr int V = P::V;
  using S = Slots<T, N, kVec>;
  using Base = Engine<A, S>;
  using Base::row_;

 public:
  static constexpr int kSlots = N * V;  // elements a thread owns in each row

  __device__ __forceinline__ GradRow(const Row<A>& row, int64_t n, GroupReducer& red)
      : Base(row, red) {
    const S s = S::thread();
    count_ = s.count(int(n));
    // Both rows' loads are issued before the first use: 2N packets in flight per thread.
    s.template load<true>(row_.x(), count_, x_);
    s.template load<true>(row_.dy(), count_, dy_);
  }

  template <class F>
  __device__ __forceinline__ void for_each(F&& f) {
    launder();
    S::thread().visit2(x_, dy_, row_.a.weight(), count_, f);
  }

  template <class F>
  __device__ __forceinline__ void store(F f) {
    launder();
    S::thread().store2(row_.out(), x_, dy_, row_.a.weight(), count_, f);
  }

  // f(k, x, dy) for each valid element, k = u * V + j its slot (a constant once unrolled).
  template <class F>
  __device__ __forceinline__ void for_each_slot(F&& f) {
    launder();
    const S s = S::thread();
    const typename S::Map m(s.t, s.g, count_);
#pragma unroll
    for (int u = 0; u < N; ++u) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (m.ok(u, j)) f(u * V + j, x_[u].get(j), dy_[u].get(j));
      }
    }
  }

  // dst[column of slot k] = v[k] over a row of `cols` f32 (16-byte stores in the vector layout,
  // where a packet's V elements are adjacent columns; dst is then 16-byte aligned).
  __device__ __forceinline__ static void write_cols(float* dst, int64_t cols,
                                                    const float (&v)[kSlots]) {
    const S s = S::thread();
    const typename S::Map m(s.t, s.g, s.count(int(cols)));
#pragma unroll
    for (int u = 0; u < N; ++u) {
      if constexpr (kVec) {
        if (m.ok(u, 0)) {
#pragma unroll
          for (int j = 0; j < V; j += 4) {
            *reinterpret_cast<float4*>(dst + m.off(u, j)) =
                make_float4(v[u * V + j], v[u * V + j + 1], v[u * V + j + 2], v[u * V + j + 3]);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (m.ok(u, j)) dst[m.off(u, j)] = v[u * V + j];
        }
      }
    }
  }

 private:
  __device__ __forceinline__ void launder() {
#pragma unroll
    for (int u = 0; u < N; ++u) {
      x_[u].launder();
      dy_[u].launder();
    }
  }

  int count_;
  P x_[N], dy_[N];
};

// Both rows streamed from global memory on every pass (rows longer than registers hold); no
// per-column sums.
template <class A, int /*N: unused*/, bool kVec>
class GradStreamRow
    : public Engine<A, Slots<typename A::T, kStreamPackets<typename A::T, kVec, 2>, kVec>> {
  using T = typename A::T;
  using P = Packet<T>;
  static constexpr int C = kStreamPackets<T, kVec, 2>;
  using S = Slots<T, C, kVec>;
  using Base = Engine<A, S>;
  using Base::row_;

 public:
  static constexpr int kSlots = 0;

  __device__ __forceinline__ GradStreamRow(const Row<A>& row, int64_t n, GroupReducer& red)
      : Base(row, red), n_(n) {}

  template <class F>
  __device__ __forceinline__ void for_each(F&& f) {
    each([&](const S& s, int64_t, int cnt, const auto& xb, const auto& db, const T* w) {
      s.visit2(xb, db, w, cnt, f);
    });
  }

  template <class F>
  __device__ __forceinline__ void store(F f) {
    each([&](const S& s, int64_t c0, int cnt, const auto& xb, const auto& db, const T* w) {
      s.store2(row_.out() + c0, xb, db, w, cnt, f);
    });
  }

 private:
  // f(s, c0, cnt, xb, db, w) for each chunk: its x and dy packets, w its weight (null when
  // absent).
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    const S s = S::thread();
    const T* w = row_.a.weight();
    for (int64_t c0 = 0; c0 < n_; c0 += s.chunk()) {
      P xb[C], db[C];
      const int cnt = s.count(s.left(n_, c0));
      s.template load<true>(row_.x() + c0, cnt, xb);
      s.template load<true>(row_.dy() + c0, cnt, db);
      f(s, c0, cnt, xb, db, w ? w + c0 : nullptr);
    }
  }

  int64_t n_;
};

// The row loop of each_row for a backward op Op<kSlots>: one op object per thread lives across
// the rows (holding its per-column sums), and `finish<Engine>(a)` runs once after the last row.
template <template <int> class Op, template <class, int, bool> class Engine, int N, bool kVec,
          class A>
__device__ __forceinline__ void each_row_grad(const A& a, GroupReducer& red, float eps) {
  using R = Engine<A, N, kVec>;
  Op<R::kSlots> op(a);
  const int64_t rows = a.rows();
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += step) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < rows;
    R r(Row<A>{a, active ? row : 0}, active ? a.cols() : 0, red);
    op(r, eps);
  }
  op.template finish<R>(a);
}

// Entry of the backward ops. In the vector layout `vecs_per_thread` picks the register engine's
// N (1, 2 or 4, at most Op::kMaxN: paths an op does not take are not compiled, so they do not
// raise its register count); the scalar layout keeps Op::kScalarN packets whenever they hold the
// row. Other rows take the streaming engine, which only ops with kStream have: an op with
// per-column sums needs the row in registers, the host never launches it otherwise, and a
// launch shape that does not fit writes nothing.
template <template <int> class Op, class A>
__device__ __forceinline__ void run_grad(const A& a, int vecs_per_thread, float eps) {
  __shared__ GroupReducer::Buffer smem;
  GroupReducer red(smem);
  using O = Op<1>;
  constexpr int V = 16 / sizeof(typename A::T);
  const int64_t per_packet = int64_t(V) * blockDim.x;
  const int n = int64_t(vecs_per_thread) * per_packet >= a.cols() ? vecs_per_thread : 0;
  const bool vec = vectorizable_grad(a);
  if (vec) {
    if (n == 1) return each_row_grad<Op, GradRow, 1, true>(a, red, eps);
    if (n == 2) return each_row_grad<Op, GradRow, 2, true>(a, red, eps);
    if constexpr (O::kMaxN >= 4) {
      if (n == 4) return each_row_grad<Op, GradRow, 4, true>(a, red, eps);
    }
  } else if (int64_t(O::kScalarN) * per_packet >= a.cols()) {
    return each_row_grad<Op, GradRow, O::kScalarN, false>(a, red, eps);
  }
  if constexpr (O::kStream) {
    if (vec) return each_row_grad<Op, GradStreamRow, 0, true>(a, red, eps);
    return each_row_grad<Op, GradStreamRow, 0, false>(a, red, eps);
  }
}

}  // namespace rowwise
}  // namespace ak
