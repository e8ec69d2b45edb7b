// Portable tensor-core GEMM on mma.sync: the main path on every non-Hopper GPU (sm_75 .. sm_120)
// and Hopper's fallback for what TMA cannot take (misaligned operands, K == 0).
//
// One template covers every layout and alignment:
//  * A CTA computes a bm x bn tile with 2 (M) x threads/64 (N) warps; each warp owns a
//    (bm / 2) x (bn / (threads / 64)) sub-tile of 16 x 8 accumulator fragments.
//  * K advances in stages of 64 bytes (32 16-bit or 64 8-bit elements). One mma step eats 32 bytes
//    of K for every dtype (m16n8k16 at 2 bytes, m16n8k32 at 1 byte), so register fragments have a
//    single byte layout: one ldmatrix.x4 is an A fragment, one x4 is two B fragments.
//  * Shared tiles are K-contiguous ([rows][64 B]) or, for 16-bit MN-major operands, MN-contiguous
//    ([K][rows]) and read with ldmatrix.trans. ldmatrix transposes 16-bit units only, so 8-bit
//    MN-major operands are transposed in registers on their way into a K-contiguous tile.
//  * Global -> shared: on sm_80+, when both operands allow 16-byte copies, a V::stages-deep
//    cp.async pipeline that zero-fills past the edges. Otherwise (sm_75, misaligned operands, 8-bit
//    MN-major operands) loads are staged through registers into a double buffer: 16 bytes at a
//    time where aligned and in range, element by element under guards where not.
//  * fp8 with 1x128 / 128x128 block scales accumulates each 128-wide K block separately and adds
//    it, scaled, to the running sum in registers (two-level accumulation, as DeepSeek-V3).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "ak/mma.cuh"
#include "epilogue.cuh"

namespace ak::gemm::mma_sync {

constexpr int kStageK = 64;  // bytes of K per pipeline stage (the variants' k_bytes)
constexpr int kStepK = 32;   // bytes of K per mma step
constexpr int kGroupM = 8;   // tile rows per group of the L2-friendly CTA order

template <class E>
constexpr bool kIsFp8Type = std::is_same_v<E, __nv_fp8_e4m3> || std::is_same_v<E, __nv_fp8_e5m2>;
// T is an fp8 entry type: e4m3 or e5m2, or a mixed pair of them.
template <class T>
constexpr bool kIsFp8 = kIsFp8Type<typename Operands<T>::A> && kIsFp8Type<typename Operands<T>::B>;
template <class T>
constexpr bool kIsInt8 = std::is_same_v<T, int8_t>;
template <class T>
using Acc = std::conditional_t<kIsInt8<T>, int32_t, float>;

// ---------------------------------------------------------------------------------------------
// PTX wrappers (with those of ak/mma.cuh). Unused ones emit nothing, so an sm_75 image never
// sees cp.async or bf16/fp8 mma.
// ---------------------------------------------------------------------------------------------
// Two fp8 (T) in the low 16 bits of v, as two f16 (exact: f16 holds every e4m3 and e5m2 value).
template <class T>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t v) {
  uint32_t out;
  const auto lo = static_cast<unsigned short>(v);
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(lo));
  } else {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(out) : "h"(lo));
  }
  return out;
}

// Turing's only s8 mma shape: c (an 8 x 8 s32 quarter, two per lane) += a (8 rows x 16 bytes)
// * b (16 bytes x 8 columns).
__device__ __forceinline__ void mma_s8_m8n8k16(int32_t& c0, int32_t& c1, uint32_t a, uint32_t b) {
  asm("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
      : "+r"(c0), "+r"(c1)
      : "r"(a), "r"(b));
}

// c += A (16 rows x 32 bytes of K) * B (32 bytes of K x 8 columns). a: ldmatrix.x4 order (rows
// 0-7 / 8-15 of K bytes 0-15, then of K bytes 16-31); b: K bytes 0-15, 16-31 of columns 0-7.
// c: rows g and g + 8 (g = lane / 4), columns 2 * (lane % 4) + {0, 1}.
template <class T>
__device__ __forceinline__ void mma_step(Acc<T> (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    mma_m16n8k16<T>(c, a, b[0], b[1]);
  } else if constexpr (kIsInt8<T>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    // The x4 fragments' quarters: rows 0-7 / 8-15 times K bytes 0-15 / 16-31.
    mma_s8_m8n8k16(c[0], c[1], a[0], b[0]);
    mma_s8_m8n8k16(c[0], c[1], a[2], b[1]);
    mma_s8_m8n8k16(c[2], c[3], a[1], b[0]);
    mma_s8_m8n8k16(c[2], c[3], a[3], b[1]);
#else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
  } else {
    static_assert(kIsFp8<T>, "mma_sync: unsupported element type");
    // a's and b's own fp8 types (they differ for mixed entries).
    using A = typename Operands<T>::A;
    using B = typename Operands<T>::B;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    static_assert(sizeof(T) == 0, "fp8 mma.sync needs sm_89: the build must not instantiate it");
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
    // Hopper's tensor cores take fp8 only through wgmma: ptxas lowers an fp8 mma.sync to f16
    // conversions and two f16 mmas, and ptxas 12.4 gets that wrong (of the two 32-byte K steps
    // of a stage it computes the first twice). The same lowering spelled out here compiles
    // right under every toolkit. The two mmas take the low, then the high 16 bits of each
    // register: the same K positions in A and B, so each computes a K-permuted half.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t a16[4] = {
          fp8x2_to_f16x2<A>(a[0] >> (16 * h)), fp8x2_to_f16x2<A>(a[1] >> (16 * h)),
          fp8x2_to_f16x2<A>(a[2] >> (16 * h)), fp8x2_to_f16x2<A>(a[3] >> (16 * h))};
      const uint32_t b16[2] = {fp8x2_to_f16x2<B>(b[0] >> (16 * h)),
                               fp8x2_to_f16x2<B>(b[1] >> (16 * h))};
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a16[0]), "r"(a16[1]), "r"(a16[2]), "r"(a16[3]), "r"(b16[0]), "r"(b16[1]));
    }
#else
    // One instruction per (a, b) type pair: e4m3 / e5m2 each, mixed pairs included.
#define AK_MMA_FP8(TYPES)                               \
  asm("mma.sync.aligned.m16n8k32.row.col.f32." TYPES    \
      ".f32 {%0, %1, %2, %3}, "                         \
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
    constexpr bool kA4 = std::is_same_v<A, __nv_fp8_e4m3>, kB4 = std::is_same_v<B, __nv_fp8_e4m3>;
    if constexpr (kA4 && kB4) {
      AK_MMA_FP8("e4m3.e4m3");
    } else if constexpr (kA4) {
      AK_MMA_FP8("e4m3.e5m2");
    } else if constexpr (kB4) {
      AK_MMA_FP8("e5m2.e4m3");
    } else {
      AK_MMA_FP8("e5m2.e5m2");
    }
#undef AK_MMA_FP8
#endif
  }
}

// ---------------------------------------------------------------------------------------------
// Shared-memory tile layouts (byte offsets within one operand's tile of one stage).
// ---------------------------------------------------------------------------------------------

// K-contiguous: row r (an M or N index) holds 64 bytes of K as four 16-byte chunks, the chunk
// index XORed with (r / 2) % 4. ldmatrix reads 8 consecutive rows at one chunk; unswizzled, rows
// r and r + 2 share banks (4-way conflict), swizzled the 8 reads cover all 32 banks.
__device__ __forceinline__ uint32_t kc_off(int r, int kb) {
  return r * kStageK + ((((kb >> 4) ^ (r >> 1)) & 3) << 4) + (kb & 15);
}

// MN-contiguous (16-bit MN-major operands): K row k holds the tile's kRowBytes of M (or N), the
// low 3 bits of the 16-byte chunk index XORed with k % 8, so ldmatrix.trans's 8 consecutive K rows
// at one chunk hit 8 distinct bank groups.
template <int kRowBytes>
__device__ __forceinline__ uint32_t mnc_off(int k, int b) {
  static_assert(kRowBytes >= 128 && kRowBytes % 128 == 0, "swizzle needs 8 chunks per row");
  return k * kRowBytes + (((b >> 4) ^ (k & 7)) << 4) + (b & 15);
}

// ---------------------------------------------------------------------------------------------
// Global operands.
// ---------------------------------------------------------------------------------------------

// One operand as the loaders see it: "rows" are its M (or N) index, k its reduction index.
struct Operand {
  const uint8_t* base;
  int64_t ld_bytes;  // stride between rows (K-major) or between K indices (MN-major)
  int64_t rows, k;   // extents
  int64_t row0;      // first row of this CTA's tile
  bool mn_major;     // unit stride along rows instead of K
  bool vec;          // 16-byte accesses legal: base and ld_bytes are multiples of 16
};

__device__ __forceinline__ int clamp16(int64_t bytes) {
  return static_cast<int>(bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes));
}

// 16-byte chunk c of a stage (k0 = first K index) along the operand's unit-stride dimension:
// its global address, how many of its bytes are inside the operand, and its tile offset. kMn says
// the tile is MN-contiguous, which is only used with an MN-major operand (else K-major).
template <int kRows, int kE, bool kMn>
struct Chunk {
  const uint8_t* src;
  int bytes;
  uint32_t off;

  __device__ __forceinline__ Chunk(const Operand& op, int64_t k0, int c) {
    if constexpr (kMn) {
      constexpr int kPerK = kRows * kE / 16;
      const int kr = c / kPerK, rb = (c % kPerK) * 16;
      const int64_t row = op.row0 + rb / kE, kg = k0 + kr;
      bytes = kg < op.k ? clamp16((op.rows - row) * kE) : 0;
      src = op.base + kg * op.ld_bytes + row * kE;
      off = mnc_off<kRows * kE>(kr, rb);
    } else {
      const int r = c / (kStageK / 16), kb = (c % (kStageK / 16)) * 16;
      const int64_t row = op.row0 + r, kg = k0 + kb / kE;
      bytes = row < op.rows ? clamp16((op.k - kg) * kE) : 0;
      src = op.base + row * op.ld_bytes + kg * kE;
      off = kc_off(r, kb);
    }
  }
};

// cp.async of one stage of an operand into its tile at shared address dst.
template <int kRows, int kE, int kThreads, bool kMn>
__device__ __forceinline__ void load_async(uint32_t dst, const Operand& op, int64_t k0, int tid) {
  constexpr int kChunks = kRows * kStageK / 16;
  static_assert(kChunks % kThreads == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const Chunk<kRows, kE, kMn> ch(op, k0, tid + i * kThreads);
    // A fully out-of-range chunk still needs a valid address; it reads 0 bytes of it.
    cp_async_16(dst + ch.off, ch.bytes > 0 ? ch.src : op.base, ch.bytes);
  }
}

// One element, zero-extended. Elements are assumed naturally aligned (as every tensor's are);
// nothing wider is.
template <int kE>
__device__ __forceinline__ uint32_t load_elem(const uint8_t* src) {
  if constexpr (kE == 2) {
    return __ldg(reinterpret_cast<const unsigned short*>(src));
  } else {
    return __ldg(src);
  }
}

// Byte rotation of the 64-bit value (hi:lo) right by 8 * rot bits.
__device__ __forceinline__ void rotr_bytes(uint32_t& lo, uint32_t& hi, int rot) {
  if (rot >= 4) {
    const uint32_t t = lo;
    lo = hi;
    hi = t;
  }
  const int s = (rot & 3) * 8;
  const uint32_t l = __funnelshift_r(lo, hi, s);
  hi = __funnelshift_r(hi, lo, s);
  lo = l;
}

// One stage of an operand staged through registers: load() issues the global loads (so they fly
// during the current stage's math), store() writes the tile. Each thread holds kChunks 16-byte
// chunks or, for an 8-bit MN-major operand, kUnits 4 (K) x 8 (rows) blocks that store()
// transposes into K-contiguous rows (the same 32 bytes per unit either way).
template <int kRows, int kE, int kThreads, bool kMn>
struct Staged {
  static constexpr int kChunks = kRows * kStageK / 16 / kThreads;
  static constexpr int kRowsPerUnit = 8;  // transposed block: rows x 4 K bytes
  static constexpr int kUnits = kRows * kStageK / 32 / kThreads;
  static_assert(kChunks * kThreads * 16 == kRows * kStageK, "uneven split of the tile");
  static_assert(kUnits * kThreads * 32 == kRows * kStageK, "uneven split of the tile");
  static_assert(kE == 2 || !kMn, "8-bit tiles are always K-contiguous");
  uint32_t w[kChunks * 4];

  __device__ __forceinline__ void load(const Operand& op, int64_t k0, int tid) {
    if constexpr (kE == 1) {
      if (op.mn_major) {
        load_transposed(op, k0, tid);
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const Chunk<kRows, kE, kMn> ch(op, k0, tid + i * kThreads);
      if (op.vec && ch.bytes == 16) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(ch.src));
        w[4 * i] = v.x;
        w[4 * i + 1] = v.y;
        w[4 * i + 2] = v.z;
        w[4 * i + 3] = v.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) w[4 * i + j] = 0;
#pragma unroll
        for (int e = 0; e < 16 / kE; ++e) {
          if (e * kE < ch.bytes) {
            w[4 * i + e * kE / 4] |= load_elem<kE>(ch.src + e * kE) << (8 * ((e * kE) & 3));
          }
        }
      }
    }
  }

  // Unit u covers rows (u % (kRows / 8)) * 8 + [0, 8) and K indices (u / (kRows / 8)) * 4 +
  // [0, 4): consecutive lanes read consecutive 8-byte pieces of one K row (coalesced).
  // w[2 * i], w[2 * i + 1]: the 8 row bytes at K index i.
  __device__ __forceinline__ void load_transposed(const Operand& op, int64_t k0, int tid) {
#pragma unroll
    for (int v = 0; v < kUnits; ++v) {
      const int u = tid + v * kThreads;
      const int64_t row = op.row0 + (u % (kRows / 8)) * 8;
      const int64_t left = op.rows - row;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t kg = k0 + (u / (kRows / 8)) * 4 + i;
        const uint8_t* src = op.base + kg * op.ld_bytes + row;
        uint32_t lo = 0, hi = 0;
        if (kg < op.k) {
          if (op.vec && left >= 8) {
            const uint2 x = __ldg(reinterpret_cast<const uint2*>(src));
            lo = x.x;
            hi = x.y;
          } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              if (e < left) {
                const uint32_t b = __ldg(src + e) << (8 * (e & 3));
                if (e < 4) {
                  lo |= b;
                } else {
                  hi |= b;
                }
              }
            }
          }
        }
        w[8 * v + 2 * i] = lo;
        w[8 * v + 2 * i + 1] = hi;
      }
    }
  }

  __device__ __forceinline__ void store(uint8_t* tile, const Operand& op, int tid) {
    if constexpr (kE == 1) {
      if (op.mn_major) {
        store_transposed(tile, tid);
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = tid + i * kThreads;
      uint32_t off;
      if constexpr (kMn) {
        constexpr int kPerK = kRows * kE / 16;
        off = mnc_off<kRows * kE>(c / kPerK, (c % kPerK) * 16);
      } else {
        off = kc_off(c / (kStageK / 16), (c % (kStageK / 16)) * 16);
      }
      *reinterpret_cast<uint4*>(tile + off) =
          make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    }
  }

  // Transposes a unit into 8 words (4 K bytes of one row each). Lanes write their 8 rows in an
  // order rotated by their row block, so a warp's simultaneous stores spread over the banks.
  __device__ __forceinline__ void store_transposed(uint8_t* tile, int tid) {
#pragma unroll
    for (int v = 0; v < kUnits; ++v) {
      const int u = tid + v * kThreads;
      const int rb = u % (kRows / 8), kq = u / (kRows / 8);
      const int rot = rb & 7;
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[i] = w[8 * v + 2 * i];
        hi[i] = w[8 * v + 2 * i + 1];
        rotr_bytes(lo[i], hi[i], rot);
      }
      // Byte j of the rotated K rows belongs to row (j + rot) % 8.
      const uint32_t l01 = __byte_perm(lo[0], lo[1], 0x5140),
                     l23 = __byte_perm(lo[2], lo[3], 0x5140);
      const uint32_t m01 = __byte_perm(lo[0], lo[1], 0x7362),
                     m23 = __byte_perm(lo[2], lo[3], 0x7362);
      const uint32_t h01 = __byte_perm(hi[0], hi[1], 0x5140),
                     h23 = __byte_perm(hi[2], hi[3], 0x5140);
      const uint32_t g01 = __byte_perm(hi[0], hi[1], 0x7362),
                     g23 = __byte_perm(hi[2], hi[3], 0x7362);
      const uint32_t words[8] = {__byte_perm(l01, l23, 0x5410), __byte_perm(l01, l23, 0x7632),
                                 __byte_perm(m01, m23, 0x5410), __byte_perm(m01, m23, 0x7632),
                                 __byte_perm(h01, h23, 0x5410), __byte_perm(h01, h23, 0x7632),
                                 __byte_perm(g01, g23, 0x5410), __byte_perm(g01, g23, 0x7632)};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int r = rb * kRowsPerUnit + ((j + rot) & 7);
        *reinterpret_cast<uint32_t*>(tile + kc_off(r, kq * 4)) = words[j];
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The CTA tile.
// ---------------------------------------------------------------------------------------------
template <class T, class V>
struct Tile {
  static constexpr int kE = sizeof(T);
  static constexpr int kBM = V::bm, kBN = V::bn, kThreads = V::threads;
  static constexpr int kWarpsN = kThreads / 64;  // 2 warps along M
  static constexpr int kWM = kBM / 2, kWN = kBN / kWarpsN;
  static constexpr int kMT = kWM / 16, kNT = kWN / 8;  // mma fragments per warp
  static constexpr int kBK = kStageK / kE;             // K elements per stage
  static constexpr int kABytes = kBM * kStageK, kStageBytes = (kBM + kBN) * kStageK;
  static_assert(V::k_bytes == kStageK, "mma_sync tiles are built around 64-byte K stages");
  static_assert(kThreads % 64 == 0 && kWM % 16 == 0 && kWN % 16 == 0, "bad warp tiling");
  static_assert(V::stages >= 2 && V::stages * kStageBytes <= V::smem, "smem too small");
  static_assert(!kIsFp8<T> || (kScaleBlockK % kBK == 0 && kScaleBlockN % kBN == 0),
                "a stage and a CTA's columns must lie inside one scale block");
};

// Loads one stage's fragments from shared memory and issues its mmas. kAMn / kBMn: the operand's
// tile is MN-contiguous (read with ldmatrix.trans), else K-contiguous.
template <class T, class V, bool kAMn, bool kBMn>
__device__ __forceinline__ void compute_stage(uint32_t a_tile, uint32_t b_tile,
                                              Acc<T> (&acc)[Tile<T, V>::kMT][Tile<T, V>::kNT][4],
                                              int wm, int wn, int lane) {
  using L = Tile<T, V>;
#pragma unroll
  for (int s = 0; s < kStageK / kStepK; ++s) {
    uint32_t af[L::kMT][4], bf[L::kNT][2];
#pragma unroll
    for (int i = 0; i < L::kMT; ++i) {
      const int m = wm * L::kWM + i * 16;
      if constexpr (kAMn) {
        // x4 matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
        const int k = s * 16 + (lane >> 4) * 8 + (lane & 7);
        ldmatrix_x4_trans(af[i], a_tile + mnc_off<L::kBM * 2>(k, (m + ((lane >> 3) & 1) * 8) * 2));
      } else {
        ldmatrix_x4(af[i], a_tile + kc_off(m + (lane & 15), s * kStepK + (lane >> 4) * 16));
      }
    }
#pragma unroll
    for (int j = 0; j < L::kNT; j += 2) {
      const int n = wn * L::kWN + j * 8;
      uint32_t r[4];
      if constexpr (kBMn) {
        // x4 matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        const int k = s * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        ldmatrix_x4_trans(r, b_tile + mnc_off<L::kBN * 2>(k, (n + (lane >> 4) * 8) * 2));
      } else {
        ldmatrix_x4(r, b_tile + kc_off(n + (lane >> 4) * 8 + (lane & 7),
                                       s * kStepK + ((lane >> 3) & 1) * 16));
      }
      bf[j][0] = r[0];
      bf[j][1] = r[1];
      bf[j + 1][0] = r[2];
      bf[j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < L::kMT; ++i) {
#pragma unroll
      for (int j = 0; j < L::kNT; ++j) mma_step<T>(acc[i][j], af[i], bf[j]);
    }
  }
}

// One CTA tile: main loop (cp.async pipeline when kAsync, else register-staged double buffer)
// and epilogue. kBlock: fp8 block scales, promoted once per 128-wide K block.
template <class T, class V, bool kAMn, bool kBMn, bool kAsync, bool kBlock>
__device__ __forceinline__ void gemm_tile(const ak_gemm_params& p, uint8_t* smem, const Operand& a,
                                          const Operand& b, int64_t m0, int64_t n0) {
  using L = Tile<T, V>;
  constexpr int kS = V::stages;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / L::kWarpsN, wn = warp % L::kWarpsN;
  const int64_t k_tiles = (p.k + L::kBK - 1) / L::kBK;

  Acc<T> acc[L::kMT][L::kNT][4] = {};
  // With block scales the mmas accumulate one K block here, then promote() folds it into acc.
  Acc<T> part[L::kMT][L::kNT][4] = {};
  Acc<T>(&sum)[L::kMT][L::kNT][4] = kBlock ? part : acc;

  constexpr int kTilesPerBlock = kScaleBlockK / L::kBK;
  float scale_a[L::kMT][2] = {}, scale_b = 0.0f;
  const int64_t row_base = m0 + wm * L::kWM + (lane >> 2);
  // Fetched when a K block starts so that the loads hide behind its stages.
  auto fetch_scales = [&](int64_t kt) {
    if (kt % kTilesPerBlock) return;
    const int64_t kb = kt / kTilesPerBlock;
    scale_b = block_scale_b(p, n0, kb);
#pragma unroll
    for (int i = 0; i < L::kMT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = row_base + i * 16 + h * 8;
        scale_a[i][h] = m < p.m ? block_scale_a(p, m, kb) : 0.0f;
      }
    }
  };
  auto promote = [&](int64_t kt) {
    if ((kt + 1) % kTilesPerBlock && kt + 1 != k_tiles) return;
#pragma unroll
    for (int i = 0; i < L::kMT; ++i) {
#pragma unroll
      for (int j = 0; j < L::kNT; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          acc[i][j][c] += scale_a[i][c >> 1] * scale_b * part[i][j][c];
          part[i][j][c] = 0.0f;
        }
      }
    }
  };

  if constexpr (kAsync) {
    const uint32_t base = smem_u32(smem);
    auto load = [&](int64_t kt, int slot) {
      const uint32_t s = base + slot * L::kStageBytes;
      load_async<L::kBM, L::kE, L::kThreads, kAMn>(s, a, kt * L::kBK, tid);
      load_async<L::kBN, L::kE, L::kThreads, kBMn>(s + L::kABytes, b, kt * L::kBK, tid);
    };
#pragma unroll
    for (int s = 0; s < kS - 1; ++s) {
      if (s < k_tiles) load(s, s);
      cp_async_commit();  // empty groups keep the wait count uniform
    }
    int slot = 0;
#pragma unroll 1
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<kS - 2>();
      // Stage kt has landed for every thread, and every warp is done with the slot reloaded next.
      __syncthreads();
      const int64_t next = kt + kS - 1;
      if (next < k_tiles) load(next, slot == 0 ? kS - 1 : slot - 1);
      cp_async_commit();
      if constexpr (kBlock) fetch_scales(kt);
      const uint32_t s = base + slot * L::kStageBytes;
      compute_stage<T, V, kAMn, kBMn>(s, s + L::kABytes, sum, wm, wn, lane);
      if constexpr (kBlock) promote(kt);
      slot = slot == kS - 1 ? 0 : slot + 1;
    }
  } else {
    Staged<L::kBM, L::kE, L::kThreads, kAMn> sa;
    Staged<L::kBN, L::kE, L::kThreads, kBMn> sb;
    if (k_tiles > 0) {
      sa.load(a, 0, tid);
      sb.load(b, 0, tid);
      sa.store(smem, a, tid);
      sb.store(smem + L::kABytes, b, tid);
    }
    __syncthreads();
#pragma unroll 1
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      const bool more = kt + 1 < k_tiles;
      if (more) {
        sa.load(a, (kt + 1) * L::kBK, tid);
        sb.load(b, (kt + 1) * L::kBK, tid);
      }
      if constexpr (kBlock) fetch_scales(kt);
      uint8_t* cur = smem + (kt & 1) * L::kStageBytes;
      compute_stage<T, V, kAMn, kBMn>(smem_u32(cur), smem_u32(cur + L::kABytes), sum, wm, wn, lane);
      if constexpr (kBlock) promote(kt);
      if (more) {
        // The other buffer was last read before the previous iteration's barrier.
        uint8_t* nxt = smem + ((kt + 1) & 1) * L::kStageBytes;
        sa.store(nxt, a, tid);
        sb.store(nxt + L::kABytes, b, tid);
      }
      __syncthreads();
    }
  }

  const int64_t col_base = n0 + wn * L::kWN + (lane & 3) * 2;
  // Computed here rather than carried through the main loop, which has no register to spare.
  const int64_t d_off = blockIdx.z * p.d_bs;
#pragma unroll
  for (int i = 0; i < L::kMT; ++i) {
#pragma unroll
    for (int j = 0; j < L::kNT; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = row_base + i * 16 + h * 8, n = col_base + j * 8;
        if constexpr (kIsInt8<T>) {
          epilogue2_s32(p, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1], d_off);
        } else {
          epilogue2(p, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1], d_off);
        }
      }
    }
  }
}

// Picks the global->shared path: cp.async needs sm_80, 16-byte-legal operands and, for 8-bit
// dtypes, K-major operands (8-bit tiles are K-contiguous; only the staged path transposes).
template <class T, class V, bool kAMn, bool kBMn, bool kBlock>
__device__ __forceinline__ void dispatch_path(const ak_gemm_params& p, uint8_t* smem,
                                              const Operand& a, const Operand& b, int64_t m0,
                                              int64_t n0) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  if (a.vec && b.vec && !(sizeof(T) == 1 && (a.mn_major || b.mn_major))) {
    gemm_tile<T, V, kAMn, kBMn, true, kBlock>(p, smem, a, b, m0, n0);
    return;
  }
#endif
  gemm_tile<T, V, kAMn, kBMn, false, kBlock>(p, smem, a, b, m0, n0);
}

template <class T, class V>
__device__ __forceinline__ void run(const ak_gemm_params& p) {
  extern __shared__ __align__(128) uint8_t smem[];
  // The tile grid is counted from the extents, not from gridDim: the host launches one block per
  // tile along grid.x (up to 2^31 - 1 tiles; a [tiles_n, tiles_m] grid would stop M at 65535
  // tile rows), and any grid covering the tiles computes the same result. Grouped CTA order:
  // kGroupM tile rows sweep the columns together, so concurrently running CTAs share A row
  // panels and B column panels in L2.
  const int64_t tiles_n = (p.n + V::bn - 1) / V::bn, tiles_m = (p.m + V::bm - 1) / V::bm;
  const int64_t lin = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  if (lin >= tiles_m * tiles_n) return;  // the whole block: no barrier is left waiting
  const int64_t group = lin / (kGroupM * tiles_n), first_m = group * kGroupM;
  const int64_t group_m = min(tiles_m - first_m, static_cast<int64_t>(kGroupM));
  const int64_t in_group = lin - group * kGroupM * tiles_n;
  const int64_t m0 = (first_m + in_group % group_m) * V::bm, n0 = (in_group / group_m) * V::bn;

  constexpr int kE = sizeof(T);
  const bool a_mn = p.flags & kAMMajor, b_mn = !(p.flags & kBKMajor);
  const int64_t lda = p.lda * kE, ldb = p.ldb * kE;
  // Batches: grid.z is the matrix (the host launches at most 65535 per call); broadcast
  // operands have batch stride 0.
  const auto* pa = static_cast<const uint8_t*>(p.a) + blockIdx.z * p.a_bs * kE;
  const auto* pb = static_cast<const uint8_t*>(p.b) + blockIdx.z * p.b_bs * kE;
  const bool a_vec = ((reinterpret_cast<uintptr_t>(pa) | lda) & 15) == 0;
  const bool b_vec = ((reinterpret_cast<uintptr_t>(pb) | ldb) & 15) == 0;
  const Operand a{pa, lda, p.m, p.k, m0, a_mn, a_vec};
  const Operand b{pb, ldb, p.n, p.k, n0, b_mn, b_vec};

  if constexpr (kE == 2) {
    // The tile layout follows the operand's, so each layout gets its own fragment loads.
    if (a_mn) {
      if (b_mn) {
        dispatch_path<T, V, true, true, false>(p, smem, a, b, m0, n0);
      } else {
        dispatch_path<T, V, true, false, false>(p, smem, a, b, m0, n0);
      }
    } else if (b_mn) {
      dispatch_path<T, V, false, true, false>(p, smem, a, b, m0, n0);
    } else {
      dispatch_path<T, V, false, false, false>(p, smem, a, b, m0, n0);
    }
  } else if constexpr (kIsFp8<T>) {
    // The host sets both modes to block scales or neither.
    if (p.scale_mode_a == kScaleBlock) {
      dispatch_path<T, V, false, false, true>(p, smem, a, b, m0, n0);
    } else {
      dispatch_path<T, V, false, false, false>(p, smem, a, b, m0, n0);
    }
  } else {
    dispatch_path<T, V, false, false, false>(p, smem, a, b, m0, n0);
  }
}

}  // namespace ak::gemm::mma_sync

// `op` (matmul / scaled_mm) needs no code of its own: scales and bias are read from p either way.
#define AK_ENTRY_MMA_SYNC(symbol, op, T, V)                \
  extern "C" __global__ void __launch_bounds__(V::threads) \
      symbol(const __grid_constant__ ak_gemm_params p) {   \
    ak::gemm::mma_sync::run<T, V>(p);                      \
  }
