// GEMM path for sm_100a (B200): tcgen05.mma (UMMA) with tensor-memory accumulators, TMA loads,
// persistent CTAs.
//
// UNVERIFIED ON HARDWARE. No Blackwell GPU was available when this path was written: it compiles
// into the sm_100a image, and the descriptor fields it sets by hand were checked on the CPU
// against the PTX ISA tables and against cute::UMMA::make_umma_desc, but it has never run. The
// runtime routes GEMMs to these entries only when the user opts in with AOTKERNELS_GEMM_TCGEN05=1.
//
// One CTA per SM (the 4-stage ring takes 192 KiB of shared memory), 10 warps:
//   warp 8      TMA producer: one lane loads a 128 x 128 B tile of A and a 256 x 128 B tile of B
//               per stage (128B-swizzled boxes, as the host encodes them) and arms the stage's
//               "full" mbarrier with the byte count.
//   warp 9      MMA issuer: allocates all 512 TMEM columns (two 128 x 256 accumulators, so the
//               epilogue of one tile overlaps the main loop of the next), issues 4 tcgen05.mma of
//               K = 32 bytes per stage and tcgen05.commits the stage's "empty" mbarrier, then the
//               accumulator's "full" mbarrier.
//   warps 0-7   epilogue: warp w reads TMEM lanes 32 * (w % 4) .. + 31 (the lanes tcgen05.ld lets
//               it reach), i.e. tile rows, and columns 128 * (w / 4) .. + 127, 32 at a time with
//               tcgen05.ld.32x32b.x32, and stores them through the shared epilogue (epilogue2 /
//               epilogue2_s32) before handing the buffer back.
// Block scales (scale_mode 3, fp8 only) split the accumulation at every 128-K block (= one stage):
// the MMA warp starts a fresh accumulator per block and the epilogue warps fold it into registers
// with block_scale_a * block_scale_b (two-level accumulation, as DeepSeek-V3); that is why each
// epilogue thread owns 128 columns, and why there are eight epilogue warps rather than four.
//
// Descriptors: the smem operand descriptor is CuTe's UMMA::SmemDescriptor filled by hand (the
// layouts are fixed by the host's TMA boxes, not built as CuTe tensors); the instruction
// descriptor comes from cute::UMMA::make_runtime_instr_desc. Operand majorness (V::a_mmajor /
// V::b_kmajor) is compiled in; MN-major operands (16-bit only) set the instruction descriptor's
// transpose bit and use the smem descriptor's MN-major canonical form. The host routes K >= 1
// only: with no K step the MMA warp would hand the epilogue an unwritten accumulator.
#pragma once

#include <cuda_fp8.h>
#include <cutlass/arch/barrier.h>

#include <cstdint>
#include <cute/arch/copy_sm100.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/arch/mma_sm100_umma.hpp>
#include <cute/arch/tmem_allocator_sm100.hpp>
#include <type_traits>

#include "epilogue.cuh"

// tcgen05 and the kind::i8 MMA exist only in the arch-specific sm_100a target (CuTe keys its own
// wrappers on the same macro).
#if defined(__CUDA_ARCH_FEAT_SM100_ALL)
#define AK_TCGEN05_ENABLED 1
#endif

namespace ak::gemm::tc {

constexpr int kEpilogueWarps = 8;
constexpr int kProducerWarp = 8;
constexpr int kMmaWarp = 9;
constexpr int kThreads = 32 * 10;
constexpr int kUmmaM = 128;
constexpr int kUmmaN = 256;
constexpr int kAccBuffers = 2;
constexpr int kTmemCols = kAccBuffers * kUmmaN;  // 512: all of an SM's tensor memory
constexpr int kColsPerThread = kUmmaN / 2;       // two epilogue warps per TMEM lane quarter
constexpr int kSwizzleBytes = 128;               // CU_TENSOR_MAP_SWIZZLE_128B: one atom row
constexpr int kAtomBytes = 8 * kSwizzleBytes;    // 8 rows: the swizzle pattern repeats per 1 KiB
constexpr int kMmaKBytes = 32;                   // K of one tcgen05.mma: 16 f16 / 32 8-bit
constexpr int kTileGroupM = 8;                   // M tiles per L2 group (they share B columns)

// The CuTe spelling of each element type, for the instruction descriptor (int8_t is its own).
template <class T>
using CuteType = std::conditional_t<
    std::is_same_v<T, __half>, cute::half_t,
    std::conditional_t<std::is_same_v<T, __nv_bfloat16>, cute::bfloat16_t,
                       std::conditional_t<std::is_same_v<T, __nv_fp8_e4m3>, cute::float_e4m3_t,
                                          std::conditional_t<std::is_same_v<T, __nv_fp8_e5m2>,
                                                             cute::float_e5m2_t, T>>>>;

// Per dtype x layout: the tcgen05.mma kind (through its CuTe wrapper), accumulator type and
// instruction descriptor. kind::f16 for f16/bf16, kind::f8f6f4 for fp8, kind::i8 (s32) for int8.
template <class T, bool kAMn, bool kBMn>
struct Mma {
  // a's and b's element types (they differ for mixed fp8 entries, see ak_mixed_t).
  using EA = CuteType<typename Operands<T>::A>;
  using EB = CuteType<typename Operands<T>::B>;
  static constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  static constexpr bool kFp8 = sizeof(T) == 1 && !kInt8;
  static_assert(sizeof(T) == 2 || (!kAMn && !kBMn), "8-bit operands are K-major only");
  using Acc = std::conditional_t<kInt8, int32_t, float>;
  static constexpr cute::UMMA::Major kAMajor = kAMn ? cute::UMMA::Major::MN : cute::UMMA::Major::K;
  static constexpr cute::UMMA::Major kBMajor = kBMn ? cute::UMMA::Major::MN : cute::UMMA::Major::K;
  using Op = std::conditional_t<
      sizeof(T) == 2, cute::SM100_MMA_F16BF16_SS<EA, EB, float, kUmmaM, kUmmaN, kAMajor, kBMajor>,
      std::conditional_t<kInt8,
                         cute::SM100_MMA_S8_SS<EA, EB, int32_t, kUmmaM, kUmmaN, kAMajor, kBMajor>,
                         cute::SM100_MMA_F8F6F4_SS>>;
  // The 32-bit instruction descriptor in the upper half, as the CuTe wrappers take it.
  __host__ __device__ static uint64_t idesc() {
    return cute::UMMA::make_runtime_instr_desc<EA, EB, Acc, kUmmaM, kUmmaN, kAMajor, kBMajor>();
  }
};

// Shared-memory descriptor of one operand slice in the 128B-swizzled layout TMA writes.
//   K-major:  rows (M or N) at 128 B, 8-row swizzle atoms at SBO = 1 KiB; LBO unused for
//             swizzled K-major layouts (set to 16 B, i.e. the encoded 1 the ISA assumes).
//   MN-major: 64 MN elements (128 B) per row, one row per k, 8-k atoms at SBO = 1 KiB, and the
//             next 64 MN elements (the next TMA box) at LBO = box bytes.
// base_offset stays 0: every atom starts on a 1 KiB boundary (the ring is 1 KiB aligned and a
// K step inside an atom only moves the start address, as CuTe's descriptor iterator does).
__host__ __device__ inline uint64_t smem_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  cute::UMMA::SmemDescriptor d;
  d.start_address_ = static_cast<uint16_t>(smem_addr >> 4);
  d.leading_byte_offset_ = static_cast<uint16_t>(lbo >> 4);
  d.stride_byte_offset_ = static_cast<uint16_t>(sbo >> 4);
  d.version_ = 1;  // bits 46-48 = 0b001 (sm_100 descriptor)
  d.base_offset_ = 0;
  d.lbo_mode_ = 0;  // LBO is a relative byte offset
  d.layout_type_ = static_cast<uint8_t>(cute::UMMA::LayoutType::SWIZZLE_128B);
  return d.desc_;
}

// Geometry of one operand's stage: `rows` M or N rows of k_bytes bytes of K.
template <class T, int kRows, int kKBytes, bool kMn>
struct Operand {
  static constexpr int kBytes = kRows * kKBytes;
  // K-major: one box {128 B of K, kRows}; MN-major: boxes {128 B of MN, BK} side by side.
  static constexpr int kBoxes = kMn ? kRows * int(sizeof(T)) / kSwizzleBytes : 1;
  static constexpr int kBoxBytes = kBytes / kBoxes;
  static constexpr int kBoxInner = kSwizzleBytes / int(sizeof(T));  // elements per box row
  static_assert(kRows % 8 == 0 && kBoxBytes % kAtomBytes == 0);

  // Descriptor of K step ks (kMmaKBytes of K) of the stage at smem address `base`.
  __host__ __device__ static uint64_t desc(uint32_t base, int ks) {
    if constexpr (kMn) {
      // A K step of kMmaKBytes / sizeof(T) k-rows is a whole number of 1 KiB atoms.
      constexpr uint32_t kStep = kMmaKBytes / sizeof(T) * kSwizzleBytes;
      return smem_desc(base + ks * kStep, kBoxBytes, kAtomBytes);
    } else {
      return smem_desc(base + ks * kMmaKBytes, 16, kAtomBytes);
    }
  }
};

// Shared-memory carve-up (offsets from the 1 KiB aligned base) and per-variant checks.
template <class T, class V>
struct Plan {
  static_assert(V::bm == kUmmaM && V::bn == kUmmaN, "one 128 x 256 UMMA per K step");
  static_assert(V::k_bytes == kSwizzleBytes, "a stage is one 128B swizzle row of K");
  static_assert(V::threads == kThreads, "warp roles assume 8 epilogue + producer + MMA warps");
  static_assert(!V::layout_from_flags, "tcgen05 layouts are compiled in");
  static constexpr int kStages = V::stages;
  static constexpr int kBK = V::k_bytes / int(sizeof(T));
  static constexpr int kKSteps = V::k_bytes / kMmaKBytes;
  using A = Operand<T, V::bm, V::k_bytes, V::a_mmajor>;
  using B = Operand<T, V::bn, V::k_bytes, !V::b_kmajor>;
  static constexpr uint32_t kStageBytes = A::kBytes + B::kBytes;  // TMA tx count per stage
  static constexpr uint32_t kA = 0;
  static constexpr uint32_t kB = kA + kStages * A::kBytes;
  static constexpr uint32_t kFull = kB + kStages * B::kBytes;  // mbarriers, 8 B each
  static constexpr uint32_t kEmpty = kFull + 8 * kStages;
  static constexpr uint32_t kAccFull = kEmpty + 8 * kStages;
  static constexpr uint32_t kAccEmpty = kAccFull + 8 * kAccBuffers;
  static constexpr uint32_t kTmemSlot = kAccEmpty + 8 * kAccBuffers;
  // + kAtomBytes: the dynamic base is only guaranteed 16 B aligned; it is rounded up to 1 KiB.
  static constexpr uint32_t kSmem = kTmemSlot + 16 + kAtomBytes;
  static_assert(kSmem <= V::smem, "stage ring does not fit the variant's shared memory");
};

#if defined(AK_TCGEN05_ENABLED)

__device__ __forceinline__ void tmem_fence_before_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tmem_fence_after_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// 32 (16) consecutive 32-bit TMEM columns of this thread's lane (warp-collective).
__device__ __forceinline__ void tmem_load(uint32_t taddr, uint32_t (&v)[32]) {
  cute::SM100::TMEM::LOAD::SM100_TMEM_LOAD_32dp32b32x::copy(
      taddr, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
      v[14], v[15], v[16], v[17], v[18], v[19], v[20], v[21], v[22], v[23], v[24], v[25], v[26],
      v[27], v[28], v[29], v[30], v[31]);
}
__device__ __forceinline__ void tmem_load(uint32_t taddr, uint32_t (&v)[16]) {
  cute::SM100::TMEM::LOAD::SM100_TMEM_LOAD_32dp32b16x::copy(taddr, v[0], v[1], v[2], v[3], v[4],
                                                            v[5], v[6], v[7], v[8], v[9], v[10],
                                                            v[11], v[12], v[13], v[14], v[15]);
}
// 16 consecutive 32-bit TMEM columns of this thread's lane (warp-collective).
__device__ __forceinline__ void tmem_store(uint32_t taddr, const uint32_t (&v)[16]) {
  cute::SM100::TMEM::STORE::SM100_TMEM_STORE_32dp32b16x::copy(v[0], v[1], v[2], v[3], v[4], v[5],
                                                              v[6], v[7], v[8], v[9], v[10], v[11],
                                                              v[12], v[13], v[14], v[15], taddr);
}

// Tile index -> (M tile, N tile), walking kTileGroupM M tiles down each N column so that CTAs
// running at the same time share B (and A) in L2.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kTileGroupM * tiles_n;
  const int group = tile / per_group;
  const int first = group * kTileGroupM;
  const int rows = min(tiles_m - first, kTileGroupM);
  const int r = tile - group * per_group;
  tm = first + r % rows;
  tn = r / rows;
}

// One stage of an operand: 1 box (K-major) or kBoxes boxes along MN (MN-major).
template <class Op, bool kMn>
__device__ __forceinline__ void load_stage(const CUtensorMap* map, uint64_t* bar, uint8_t* dst,
                                           int mn0, int k0) {
  constexpr uint64_t kHint = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  if constexpr (kMn) {
#pragma unroll
    for (int j = 0; j < Op::kBoxes; ++j) {
      cute::SM90_TMA_LOAD_2D::copy(map, bar, kHint, dst + j * Op::kBoxBytes,
                                   mn0 + j * Op::kBoxInner, k0);
    }
  } else {
    cute::SM90_TMA_LOAD_2D::copy(map, bar, kHint, dst, k0, mn0);
  }
}

// Epilogue of this thread's 128 accumulators (f32 or s32 bits) at TMEM address taddr: row m,
// columns n0 .. n0 + 127. Not unrolled over chunks: 32 registers and one copy of the store code.
template <bool kInt8>
__device__ __forceinline__ void drain(const ak_gemm_params& p, uint32_t taddr, int64_t m,
                                      int64_t n0) {
#pragma unroll 1
  for (int c = 0; c < kColsPerThread / 32; ++c) {
    uint32_t v[32];
    tmem_load(taddr + c * 32, v);
    cutlass::arch::fence_view_async_tmem_load();  // tcgen05.wait::ld
    if (n0 >= p.n) continue;                      // warp-uniform: the loads stay collective
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int64_t n = n0 + c * 32 + j;
      if constexpr (kInt8) {
        epilogue2_s32(p, m, n, static_cast<int32_t>(v[j]), static_cast<int32_t>(v[j + 1]));
      } else {
        epilogue2(p, m, n, __uint_as_float(v[j]), __uint_as_float(v[j + 1]));
      }
    }
  }
}

#endif  // AK_TCGEN05_ENABLED

template <class T, class V>
__device__ __forceinline__ void gemm(const ak_gemm_params& p) {
#if defined(AK_TCGEN05_ENABLED)
  using P = Plan<T, V>;
  using M = Mma<T, V::a_mmajor, !V::b_kmajor>;
  using cutlass::arch::ClusterBarrier;
  using cutlass::arch::ClusterTransactionBarrier;
  extern __shared__ __align__(1024) uint8_t ak_tc_smem[];

  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(ak_tc_smem) + kAtomBytes - 1) & ~uintptr_t(kAtomBytes - 1));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + P::kFull);
  uint64_t* empty = reinterpret_cast<uint64_t*>(smem + P::kEmpty);
  uint64_t* acc_full = reinterpret_cast<uint64_t*>(smem + P::kAccFull);
  uint64_t* acc_empty = reinterpret_cast<uint64_t*>(smem + P::kAccEmpty);
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(smem + P::kTmemSlot);

  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);  // warp-uniform role
  const int lane = threadIdx.x % 32;

  if (warp == kMmaWarp) {
    cute::TMEM::Allocator1Sm alloc;
    alloc.allocate(kTmemCols, tmem_slot);
    alloc.release_allocation_lock();  // let a co-resident CTA's allocation proceed
  } else if (warp == kProducerWarp && lane == 0) {
    for (int s = 0; s < P::kStages; ++s) {
      ClusterBarrier::init(&full[s], 1);   // the producer's arrive.expect_tx
      ClusterBarrier::init(&empty[s], 1);  // one tcgen05.commit
    }
    for (int b = 0; b < kAccBuffers; ++b) {
      ClusterBarrier::init(&acc_full[b], 1);                     // one tcgen05.commit
      ClusterBarrier::init(&acc_empty[b], 32 * kEpilogueWarps);  // every epilogue thread
    }
    cutlass::arch::fence_barrier_init();
  }
  // The TMEM address written by tcgen05.alloc is read by every role after the barrier.
  tmem_fence_before_sync();
  __syncthreads();
  tmem_fence_after_sync();
  const uint32_t tmem = *tmem_slot;

  const int tiles_m = static_cast<int>((p.m + V::bm - 1) / V::bm);
  const int tiles_n = static_cast<int>((p.n + V::bn - 1) / V::bn);
  const int num_tiles = tiles_m * tiles_n;
  const int k_iters = static_cast<int>((p.k + P::kBK - 1) / P::kBK);
  // Block scales: one accumulation unit (a fresh TMEM accumulator handed to the epilogue) per
  // 128-K block, which is one stage; otherwise one unit spans the whole K loop of a tile.
  bool block = false;
  if constexpr (M::kFp8) {
    static_assert(P::kBK == kScaleBlockK, "an fp8 stage must be exactly one scale block of K");
    block = p.scale_mode_a == kScaleBlock;
  }
  const int units = block ? k_iters : 1;
  const int stages_per_unit = block ? 1 : k_iters;

  if (warp == kProducerWarp) {
    if (lane == 0) {
      cute::prefetch_tma_descriptor(&p.tmap_a);
      cute::prefetch_tma_descriptor(&p.tmap_b);
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        for (int kt = 0; kt < k_iters; ++kt) {
          ClusterBarrier::wait(&empty[stage], phase ^ 1);  // fresh barriers pass parity 1
          ClusterTransactionBarrier::arrive_and_expect_tx(&full[stage], P::kStageBytes);
          // Out-of-range rows and K columns arrive as zeros (OOB_FILL_NONE) and still count
          // their bytes, so tails need no special casing here.
          load_stage<typename P::A, V::a_mmajor>(&p.tmap_a, &full[stage],
                                                 smem + P::kA + stage * P::A::kBytes, tm * V::bm,
                                                 kt * P::kBK);
          load_stage<typename P::B, !V::b_kmajor>(&p.tmap_b, &full[stage],
                                                  smem + P::kB + stage * P::B::kBytes, tn * V::bn,
                                                  kt * P::kBK);
          if (++stage == P::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else if (warp == kMmaWarp) {
    // The whole warp runs the loop; the CuTe wrappers elect one lane to issue the MMA and the
    // commit (the same lane, so each commit tracks that lane's MMAs).
    const uint32_t smem_base = cute::cast_smem_ptr_to_uint(smem);
    const uint64_t idesc = M::idesc();
    int stage = 0;
    uint32_t phase = 0;
    uint32_t unit = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      for (int u = 0; u < units; ++u, ++unit) {
        const int buf = unit % kAccBuffers;
        ClusterBarrier::wait(&acc_empty[buf], ((unit / kAccBuffers) & 1) ^ 1);
        tmem_fence_after_sync();
        const uint32_t d = tmem + buf * kUmmaN;
        for (int s = 0; s < stages_per_unit; ++s) {
          ClusterBarrier::wait(&full[stage], phase);
          tmem_fence_after_sync();
          const uint32_t a = smem_base + P::kA + stage * P::A::kBytes;
          const uint32_t b = smem_base + P::kB + stage * P::B::kBytes;
#pragma unroll
          for (int ks = 0; ks < P::kKSteps; ++ks) {
            // The first MMA of a unit overwrites the accumulator (enable-input-d = 0).
            M::Op::fma(P::A::desc(a, ks), P::B::desc(b, ks), d, (s | ks) != 0 ? 1u : 0u, idesc);
          }
          cutlass::arch::umma_arrive(&empty[stage]);  // stage free once these MMAs have read it
          if (++stage == P::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
        cutlass::arch::umma_arrive(&acc_full[buf]);
      }
    }
  } else {
    // Epilogue: thread = tile row (TMEM lane), 128 columns of it.
    const int quarter = warp % 4;
    const int row = quarter * 32 + lane;
    const int col = (warp / 4) * kColsPerThread;
    const uint32_t lane_addr = static_cast<uint32_t>(quarter * 32) << 16;  // TMEM: lane << 16
    uint32_t unit = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int tm, tn;
      tile_coords(tile, tiles_m, tiles_n, tm, tn);
      const int64_t m = static_cast<int64_t>(tm) * V::bm + row;
      const int64_t n0 = static_cast<int64_t>(tn) * V::bn + col;
      if (!block) {
        const int buf = unit % kAccBuffers;
        ClusterBarrier::wait(&acc_full[buf], (unit / kAccBuffers) & 1);
        tmem_fence_after_sync();
        drain<M::kInt8>(p, tmem + buf * kUmmaN + col + lane_addr, m, n0);
        // This thread's reads of the buffer are done: the MMA warp may overwrite it.
        tmem_fence_before_sync();
        ClusterBarrier::arrive(&acc_empty[buf]);
        ++unit;
      } else if constexpr (M::kFp8) {
        uint32_t acc[kColsPerThread];  // running f32 sums of this thread's 128 columns
        for (int kb = 0; kb < units; ++kb, ++unit) {
          // Issued before the wait so that the loads overlap it.
          const float sa = m < p.m ? block_scale_a(p, m, kb) : 0.0f;
          const float sb = n0 < p.n ? block_scale_b(p, n0, kb) : 0.0f;
          const float s = sa * sb;
          const bool last = kb == units - 1;
          const int buf = unit % kAccBuffers;
          ClusterBarrier::wait(&acc_full[buf], (unit / kAccBuffers) & 1);
          tmem_fence_after_sync();
          const uint32_t taddr = tmem + buf * kUmmaN + col + lane_addr;
          // 16 columns at a time: 128 sums + 16 partials sit close to the 168 registers a
          // 10-warp CTA gets per thread (ptxas -v, nvcc 13.0: 40 bytes of spill).
#pragma unroll
          for (int c = 0; c < kColsPerThread / 16; ++c) {
            uint32_t v[16];
            tmem_load(taddr + c * 16, v);
            cutlass::arch::fence_view_async_tmem_load();
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const float prev = kb == 0 ? 0.0f : __uint_as_float(acc[c * 16 + j]);
              acc[c * 16 + j] = __float_as_uint(fmaf(s, __uint_as_float(v[j]), prev));
              v[j] = acc[c * 16 + j];
            }
            // The finished sums go back over the last partial, so the stores below are the
            // same chunked code as the unscaled path and need no 128 live registers.
            if (last) tmem_store(taddr + c * 16, v);
          }
          if (last) {
            cutlass::arch::fence_view_async_tmem_store();  // tcgen05.wait::st
            drain<false>(p, taddr, m, n0);
          }
          tmem_fence_before_sync();
          ClusterBarrier::arrive(&acc_empty[buf]);
        }
      }
    }
  }

  // Every MMA has completed (the epilogue waited on the last commit) and every tcgen05.ld has
  // been waited for: the allocating warp can free the columns.
  tmem_fence_before_sync();
  __syncthreads();
  if (warp == kMmaWarp) {
    tmem_fence_after_sync();
    cute::TMEM::Allocator1Sm().free(tmem, kTmemCols);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // instantiated for a target without tcgen05: the build plan's #if guards are wrong
#endif
}

}  // namespace ak::gemm::tc

// `op` (matmul | scaled_mm) is implied by T: 16-bit operands are matmul, 8-bit ones scaled_mm.
#define AK_ENTRY_TCGEN05(symbol, op, T, V)                 \
  extern "C" __global__ void __launch_bounds__(V::threads) \
      symbol(const __grid_constant__ ak_gemm_params p) {   \
    ak::gemm::tc::gemm<T, V>(p);                           \
  }
