// attention_decode (the `dec` variants): attn_fwd is a flash-decoding kernel over a KV cache,
// contiguous or paged, attn_combine the merge of its split-KV partials. Decode reads every K / V
// byte once and does little math per byte, so the kernel is built to keep many loads in flight
// at a low issue cost:
//  * One CTA per (16-row query tile, KV head, batch x split): the rows are the packed GQA group
//    (position, head) pairs, so K / V are read once per KV head.
//  * Inside the CTA, each warp walks its own key tiles (tiles t_lo + warp, + kWarps, ...) through
//    its own ring of `stages` shared-memory stages, one tile of K and V each, cp.async groups
//    per warp: the warps never wait for each other in the key loop (__syncwarp only), and
//    stages - 1 tiles per warp are in flight while one is computed.
//  * A tile is kBN = 16 keys, no more than the smallest page (kMinPage), so it spans at most two
//    pages: two block-table reads per tile, and each 16-byte copy's source is one of two bases
//    plus a lane-constant offset (a warp-wide copy covers whole rows, coalesced).
//  * At the end the warps' partials (row max, row sum, unnormalized O) meet in shared memory
//    (the ring, no longer needed) and are merged in warp order; split-KV partials then go to
//    o_accum / lse_accum for attn_combine, which merges splits in split order. Both orders are
//    fixed: results are bitwise repeatable.
//  * The math per tile is attn_fwd's (attention.cuh): S = Q K^T on mma.sync, online softmax in
//    the log2 domain, O += P V with P from registers.
#pragma once

#include "attention.cuh"

namespace ak::attention {

template <class T, class C, class P>
__device__ __forceinline__ void decode(const P& p) {
  constexpr int kD = C::d, kBM = C::bm, kBN = C::bn, kStages = C::stages;
  constexpr int kThreads = C::threads, kWarps = kThreads / 32;
  constexpr int kNT = kBN / 8, kDT = kD / 8;
  constexpr int kChunks = kD / 8;              // 16-byte chunks per row
  constexpr int kRowsPerCopy = 32 / kChunks;   // rows one warp-wide copy covers
  constexpr int kCopies = kBN / kRowsPerCopy;  // copies per lane per K (or V) tile
  constexpr int kTile = kBN * kD * 2, kStage = 2 * kTile;
  constexpr int kRing = kWarps * kStages * kStage;
  static_assert(kBM == 16 && kBN == 16 && kBN <= kMinPage, "one 16-row block; tiles <= a page");
  static_assert(kD % 16 == 0 && kD >= 64 && kChunks <= 32 && kStages >= 2, "tile shapes");
  static_assert(C::smem == kBM * kD * 2 + kRing, "smem = the query tile and the rings");
  static_assert(kWarps * kBM * (kD + 2) * 4 <= kRing, "the merge fits in the rings");
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sq_tile = smem;
  uint8_t* ring = smem + kBM * kD * 2;

  const Work w = cta_work(p, kBM);
  const int b = w.b, split = w.split, m0 = w.m0;
  const Seq& s = w.s;
  const Rows& rw = w.rw;
  const int hk = rw.kv_head();
  const KeyRange kr = key_range<kBN>(p, s, rw, m0, kBM, split);

  const int d = p.d;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  load_q<kD, kBM, kThreads>(sq_tile, p, s, rw, m0);
  copy_commit();

  // The lane's part of every copy: row lr of each kRowsPerCopy, chunk c; chunks past d are
  // zero-filled (a padded head dim), as are rows past the sequence.
  const int lr = lane / kChunks, c = lane % kChunks;
  const bool c_in = c * 8 < d;
  const bool paged = p.flags & kPaged;
  const int* bt = static_cast<const int*>(p.block_table) + b * p.bt_sb;
  const int64_t k_ss = p.k_ss * 2, v_ss = p.v_ss * 2;
  const int64_t k_lane = hk * p.k_sh * 2 + lr * k_ss + c * 16;
  const int64_t v_lane = hk * p.v_sh * 2 + lr * v_ss + c * 16;
  const int64_t k_step = kRowsPerCopy * k_ss, v_step = kRowsPerCopy * v_ss;
  uint8_t* my_ring = ring + warp * kStages * kStage;
  const bool full_d = d == kD;  // the common case: no chunk to zero-fill, no k-step to skip

  // Tile t into stage st. Its rows r < split_r lie from key n0 on in the first page (or the
  // contiguous cache), the others from the page's end on in the next page: row r of K is at
  // k_base[r >= split_r] + r * k_ss.
  auto load_kv = [&](int t, int st) {
    const int n0 = t * kBN;
    const int valid = s.sk - n0;  // rows of the tile inside the sequence (> 0)
    int64_t k0 = n0 * k_ss, v0 = n0 * v_ss, k1 = k0, v1 = v0;
    int split_r = kBN;
    if (paged) {
      const int blk = n0 / p.page_size, off = n0 - blk * p.page_size;
      const int64_t page0 = bt[blk];
      k0 = page0 * p.k_sb * 2 + off * k_ss;
      v0 = page0 * p.v_sb * 2 + off * v_ss;
      split_r = p.page_size - off;
      // The next page's entry is read only when the tile's valid rows reach it: the table
      // need not hold anything valid past the sequence.
      const int64_t page1 = split_r < min(valid, kBN) ? bt[blk + 1] : page0;
      k1 = page1 * p.k_sb * 2 - split_r * k_ss;
      v1 = page1 * p.v_sb * 2 - split_r * v_ss;
    }
    uint8_t* dst = my_ring + st * kStage;
    if (full_d && valid >= kBN && split_r >= kBN) {
      // Nearly every tile: all rows in the sequence and in one page, all chunks inside d. Two
      // adds and the copy per chunk; the general loop below costs ~14 instructions per chunk.
      const uint8_t* ksrc = s.k + k0 + k_lane;
      const uint8_t* vsrc = s.v + v0 + v_lane;
#pragma unroll
      for (int i = 0; i < kCopies; ++i, ksrc += k_step, vsrc += v_step) {
        const int r = i * kRowsPerCopy + lr;
        copy16(dst + tile_off<kD>(r, c), ksrc);
        copy16(dst + kTile + tile_off<kD>(r, c), vsrc);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int r = i * kRowsPerCopy + lr;
      const bool in = c_in && r < valid;
      const bool in_first = r < split_r;
      const uint8_t* ksrc = s.k + (in_first ? k0 : k1) + k_lane + i * k_step;
      const uint8_t* vsrc = s.v + (in_first ? v0 : v1) + v_lane + i * v_step;
      copy16(dst + tile_off<kD>(r, c), in ? ksrc : nullptr, p.k);
      copy16(dst + kTile + tile_off<kD>(r, c), in ? vsrc : nullptr, p.v);
    }
  };

  // The warp's tiles, interleaved with the other warps' so that the CTA streams one range.
  const int first = kr.t_lo + warp;
  const int count = first < kr.t_hi ? (kr.t_hi - first + kWarps - 1) / kWarps : 0;
  // Loads the warp's i-th tile into stage st; past the last one an empty group keeps the
  // wait counts uniform.
  auto issue = [&](int i, int st) {
    if (i < count) load_kv(first + i * kWarps, st);
    copy_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i, i);
  copy_wait<kStages - 1>();  // Q has landed (the first tiles may still be in flight)
  __syncthreads();

  float o[1][kDT][4];
#pragma unroll
  for (int i = 0; i < kDT; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  const Swizzled<kD> q_addr(smem_u32(sq_tile), lane & 15, lane / 16);
  const Swizzled<kD> k_addr(smem_u32(my_ring), (lane / 16) * 8 + (lane & 7), (lane / 8) & 1);
  const Swizzled<kD> v_addr(smem_u32(my_ring + kTile), ((lane / 8) & 1) * 8 + (lane & 7),
                            lane / 16);

  int st = 0, st_next = kStages - 1;
  for (int i = 0; i < count; ++i) {
    copy_wait<kStages - 2>();  // tile i has landed
    __syncwarp();              // for every lane, and every lane is done with tile i - 1
    issue(i + kStages - 1, st_next);
    const int n0 = (first + i * kWarps) * kBN;
    float sc[1][kNT][4];
    const Swizzled<kD> k_at = k_addr.at(st * kStage), v_at = v_addr.at(st * kStage);
    if (full_d) {
      qk_tile<T, true>(sc, q_addr, k_at, d);
    } else {
      qk_tile<T, false>(sc, q_addr, k_at, d);
    }
    log2_scores(sc, p);
    if (kr.crosses(p, n0, kBN, s.sk)) mask_scores(sc, p, rw, kr, s.sk, n0, m0);
    online_softmax<true>(sc, o, row_max, row_sum);
    if (full_d) {
      pv_tile<T, true>(o, sc, v_at, d);
    } else {
      pv_tile<T, false>(o, sc, v_at, d);
    }
    st = st + 1 == kStages ? 0 : st + 1;
    st_next = st_next + 1 == kStages ? 0 : st_next + 1;
  }
  copy_wait<0>();   // only empty groups remain, but nothing may be in flight past here
  __syncthreads();  // every warp is done with its ring: the rings hold the merge now

  // Each warp's partial: unnormalized O [16][kD] and (row max, row sum) per row.
  float* part = reinterpret_cast<float*>(ring);
  float* stat = part + kWarps * kBM * kD;
  {
    const int g = lane / 4, t4 = lane % 4;
    float* mine = part + warp * kBM * kD;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
#pragma unroll
      for (int i = 0; i < kDT; ++i) {
        *reinterpret_cast<float2*>(mine + r * kD + i * 8 + 2 * t4) =
            make_float2(o[0][i][2 * h], o[0][i][2 * h + 1]);
      }
      const float total = quad_sum(row_sum[0][h]);
      if (t4 == 0) {
        stat[(warp * kBM + r) * 2] = row_max[0][h];
        stat[(warp * kBM + r) * 2 + 1] = total;
      }
    }
  }
  __syncthreads();

  // The merge, 8 columns per step: warps in order 0, 1, ..., each weighted by exp2(its max -
  // the max); a row without a visible key writes 0 (and an LSE of -inf).
  const bool split_out = p.flags & kSplit;
  for (int id = tid; id < kBM * kChunks; id += kThreads) {
    const int r = id / kChunks, cc = id % kChunks;
    const int row = m0 + r;
    if (row >= rw.rows || cc * 8 >= d) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, stat[(w * kBM + r) * 2]);
    const float ref = mx == -INFINITY ? 0.f : mx;
    float acc[8] = {}, total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp2f(stat[(w * kBM + r) * 2] - ref);
      total += wt * stat[(w * kBM + r) * 2 + 1];
      const float4* src = reinterpret_cast<const float4*>(part + (w * kBM + r) * kD + cc * 8);
      const float4 lo = src[0], hi = src[1];
      acc[0] += wt * lo.x, acc[1] += wt * lo.y, acc[2] += wt * lo.z, acc[3] += wt * lo.w;
      acc[4] += wt * hi.x, acc[5] += wt * hi.y, acc[6] += wt * hi.z, acc[7] += wt * hi.w;
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int64_t pos = rw.pos_of(row);
    const int head = rw.head_of(row);
    if (split_out) {
      const int64_t acc_row =
          split * p.acc_split + (static_cast<int64_t>(b) * p.heads + head) * s.sq + pos;
      float4* dst =
          reinterpret_cast<float4*>(static_cast<float*>(p.o_accum) + acc_row * d + cc * 8);
      dst[0] = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      dst[1] = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
      if (cc == 0) {
        static_cast<float*>(p.lse_accum)[acc_row] =
            total > 0.f ? (mx + __log2f(total)) * kLn2 : -INFINITY;
      }
      continue;
    }
    uint4 packed;
    packed.x = pack2<T>(acc[0] * inv, acc[1] * inv);
    packed.y = pack2<T>(acc[2] * inv, acc[3] * inv);
    packed.z = pack2<T>(acc[4] * inv, acc[5] * inv);
    packed.w = pack2<T>(acc[6] * inv, acc[7] * inv);
    *reinterpret_cast<uint4*>(s.o + pos * p.o_ss * 2 + head * p.o_sh * 2 + cc * 16) = packed;
  }
}

// ---------------------------------------------------------------------------------------------
// attn_combine: out = sum_s exp(lse_s - lse) * o_s, lse = log sum_s exp(lse_s), one CTA of
// kCombineWarps warps per (batch, head, position) row. Every warp weighs all splits (split s on
// lane s % 32; the same bits in every warp), then warp w sums its contiguous share of the splits
// over its lane's d / 32 columns, kBatch splits' loads in flight at a time, and warp 0 adds the
// shares in warp order. Both orders are fixed. A long context has up to kMaxSplits partials per
// row: one load latency per split, or per batch of one warp, would cost more than their bytes.
// Rows without any visible key (every lse_s = -inf) get 0 and -inf.
// ---------------------------------------------------------------------------------------------
template <class T, class C, class P>
__device__ __forceinline__ void combine(const P& p) {
  constexpr int kVec = C::d / 32;  // columns per lane
  constexpr int kWarps = kCombineWarps, kPerLane = kMaxSplits / 32;
  constexpr int kBatch = 16;  // splits whose loads are in flight together
  static_assert(kVec == 2 || kVec == 4 || kVec == 8, "a lane's columns: one or two vectors");
  __shared__ float weight[kMaxSplits];
  __shared__ __align__(16) float share[kWarps][C::d];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x;
  const float* lse_acc = static_cast<const float*>(p.lse_accum);
  const float* o_acc = static_cast<const float*>(p.o_accum);
  const int d = p.d, n = p.num_splits;
  float lse_s[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int s = lane + 32 * j;
    lse_s[j] = s < n ? lse_acc[s * p.acc_split + row] : -INFINITY;
    mx = fmaxf(mx, lse_s[j]);
  }
  mx = warp_max(mx);
  const int col = lane * kVec;
  float acc[kVec] = {};
  float total = 0.f;
  if (mx != -INFINITY) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const float w = __expf(lse_s[j] - mx);
      if (warp == 0 && lane + 32 * j < n) weight[lane + 32 * j] = w;
      total += w;
    }
    total = warp_sum(total);
    __syncthreads();
    const int per = (n + kWarps - 1) / kWarps;
    const int s_lo = min(n, warp * per), s_hi = min(n, s_lo + per);
    if (col < d) {
      // Loads first, then the sums: written as one loop, the loads wait on the sums in turn.
      for (int s0 = s_lo; s0 < s_hi; s0 += kBatch) {
        float v[kBatch][kVec];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (s0 + j >= s_hi) continue;
          const float* src = o_acc + ((s0 + j) * p.acc_split + row) * d + col;
          if constexpr (kVec == 2) {
            const float2 x = *reinterpret_cast<const float2*>(src);
            v[j][0] = x.x;
            v[j][1] = x.y;
          } else {
#pragma unroll
            for (int i = 0; i < kVec; i += 4) {
              const float4 x = *reinterpret_cast<const float4*>(src + i);
              v[j][i] = x.x;
              v[j][i + 1] = x.y;
              v[j][i + 2] = x.z;
              v[j][i + 3] = x.w;
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (s0 + j >= s_hi) continue;
          const float w = weight[s0 + j];
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[i] += w * v[j][i];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) share[warp][col + i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] += share[w][col + i];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  const int64_t pos = row % p.seqlen_q, bh = row / p.seqlen_q;
  const int64_t head = bh % p.heads, b = bh / p.heads;
  uint8_t* orow =
      static_cast<uint8_t*>(p.out) + (b * p.o_sb + pos * p.o_ss + head * p.o_sh) * 2 + col * 2;
  if (col < d) {
    uint32_t packed[kVec / 2];
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) packed[i] = pack2<T>(acc[2 * i] * inv, acc[2 * i + 1] * inv);
    if constexpr (kVec == 2) {
      *reinterpret_cast<uint32_t*>(orow) = packed[0];
    } else if constexpr (kVec == 4) {
      *reinterpret_cast<uint2*>(orow) = make_uint2(packed[0], packed[1]);
    } else {
      *reinterpret_cast<uint4*>(orow) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
  if (lane == 0 && (p.flags & kWriteLse)) {
    static_cast<float*>(p.lse)[b * p.lse_sb + head * p.lse_sh + pos] =
        total > 0.f ? mx + __logf(total) : -INFINITY;
  }
}

}  // namespace ak::attention

// One macro per op: attn_fwd is the decode kernel, attn_combine the split merge.
#define AK_ATTN_DEC_attn_fwd(symbol, T, V)                    \
  extern "C" __global__ void __launch_bounds__(V::threads, 1) \
      symbol(const __grid_constant__ ak_attention_params p) { \
    ak::attention::decode<T, V>(p);                           \
  }
#define AK_ATTN_DEC_attn_combine(symbol, T, V)                                    \
  extern "C" __global__ void __launch_bounds__(32 * ak::attention::kCombineWarps) \
      symbol(const __grid_constant__ ak_attention_params p) {                     \
    ak::attention::combine<T, V>(p);                                              \
  }
#define AK_ENTRY_DEC(symbol, op, T, V) AK_ATTN_DEC_##op(symbol, T, V)
