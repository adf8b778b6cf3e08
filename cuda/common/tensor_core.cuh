// Tensor-core building blocks shared by the attention kernels: 16-byte cp.async into shared
// memory and the stage ring it feeds, ldmatrix, mma.sync m16n8k16 (sm_80 and newer), and the
// B-operand fragments of K and V tiles for 16-bit and 8-bit caches.
#pragma once

#include <stdint.h>

#include "numeric.cuh"

namespace pa {
namespace detail {

__device__ __forceinline__ void cp_async_16(void *smem_dst, const void *global_src, bool fill) {
  // src-size 0 zero-fills the 16 bytes without reading global memory (unmapped / beyond-range rows)
  uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
  int src_bytes = fill ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(src_bytes)
               : "memory");
}
// 8 bytes through L1 (.cg takes only 16), zero-filled the same way.
__device__ __forceinline__ void cp_async_8(void *smem_dst, const void *global_src, bool fill) {
  uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
  int src_bytes = fill ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Tiles [begin, end) through a kStages-deep ring of cp.async groups, the producer / consumer loop
// of the tensor-core kernels: tile t + kStages - 1 is in flight while consume(t, t % kStages)
// computes on tile t. entry(t) (a block-table lookup) is fetched one issue ahead and handed to
// issue(t, entry) when tile t is issued, so its latency hides behind a tile of work. The next
// lookup is made after the issue that consumes the previous one: made before it, both values were
// live at once and ptxas moved the fresh one into the loop's register at once, which waited for
// the load right there (DECODE: 15 % of its samples). Tile is the index type (DECODE's 32-bit
// tiles keep its loop's arithmetic 32-bit). before_loads() runs between the first lookups and the
// first issue (DECODE's chained wait for the caches, so the lookups' latency hides behind it).
// Every thread of the block calls it; it ends with every load landed and the ring free.
struct nothing_before_loads {
  __device__ __forceinline__ void operator()() const {}
};
template <int kStages, typename Tile, typename Entry, typename Issue, typename Consume,
          typename BeforeLoads = nothing_before_loads>
__device__ __forceinline__ void cp_async_tile_ring(Tile begin, Tile end, Entry &&entry,
                                                   Issue &&issue, Consume &&consume,
                                                   BeforeLoads &&before_loads = BeforeLoads()) {
  // the prologue's lookups and the loop's first all go out together
  int32_t entries[kStages];
#pragma unroll
  for (int s = 0; s < kStages; s++) entries[s] = begin + s < end ? entry(begin + s) : -1;
  before_loads();
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (begin + s < end) issue(begin + s, entries[s]);
    cp_async_commit();
  }
  int32_t next_entry = entries[kStages - 1];
#pragma unroll 1
  for (Tile tile = begin; tile < end; tile++) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const Tile ahead = tile + kStages - 1;
    if (ahead < end) {
      issue(ahead, next_entry);
      if (ahead + 1 < end) next_entry = entry(ahead + 1);
    }
    cp_async_commit();
    consume(tile, (int)(tile % kStages));
  }
  cp_async_wait<0>();
  __syncthreads();
}

// Four 8x8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// The same, each matrix transposed: lane i receives column i / 4, rows 2 (i % 4) and 2 (i % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *row) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

template <typename T>
struct mma_op;
template <>
struct mma_op<__half> {
  __device__ static __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct mma_op<__nv_bfloat16> {
  __device__ static __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// An online-softmax step's rescale of P·V accumulators in the m16n8 (and wgmma m64nN) C fragment
// layout: [n][0..1] belong to the thread's row group_id, [n][2..3] to group_id + 8. While the
// rows' references stay (once the running max settles; with the lazy reference, most tiles after
// a row's first: kSoftmaxReferenceSlack), every rescale is exactly 1 and the multiply would
// change nothing: the whole warp skips it then (kSkipOnes). Without kSkipOnes the multiplies run
// always, with no vote and no branch, for a caller that has issue gaps to fill
// (softmax_step_to_max).
template <bool kSkipOnes = true, int kOutTiles>
__device__ __forceinline__ void rescale_accumulator_rows(float (&out_acc)[kOutTiles][4],
                                                         const float (&rescale)[2]) {
  if (!kSkipOnes || __any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
    for (int n = 0; n < kOutTiles; n++) {
      out_acc[n][0] *= rescale[0];
      out_acc[n][1] *= rescale[0];
      out_acc[n][2] *= rescale[1];
      out_acc[n][3] *= rescale[1];
    }
  }
}

// The B fragments of one warp's 16 keys (rows 0..15 of `tile`, row_bytes apart in shared memory),
// for kLoads 16-channel blocks per call (one ldmatrix x4 covers 16 keys x 32 bytes):
//   scores_k(b, ks): Q·K^T for k-steps ks + s, s < kLoads, channels [16 (ks + s), +16):
//     b[s][0..1] keys 0-7, b[s][2..3] keys 8-15.
//   values_v(b, n): P·V for n-tiles n + 2s and n + 2s + 1, s < kLoads, channels [8 n + 16 s, +16):
//     b[s][0..1] n-tile n + 2s, b[s][2..3] n-tile n + 2s + 1.
// 16-bit caches: ldmatrix (transposed for V), channels in order. 8-bit caches: the same ldmatrix
// on the codes, a b16 element being two codes, so each lane gets 4 codes per register, converted
// to two T pairs. That reorders the channels inside every 16-channel block: k-step k index
// 2i + e (i < 4, e < 2) reads channel 4i + e and index 8 + 2i + e channel 4i + 2 + e, so store_q
// writes Q in that order; P·V n-tile n (even) column c holds channel 8n + 2c and n-tile n + 1
// column c channel 8n + 2c + 1, which store_out undoes.
// kBiased (int8 codes, float16 T): the codes arrive as code + kInt8CodeBias
// (int8_codes_to_biased_f16x2), the caller taking the bias off its products.
template <typename T, typename C, bool kBiased = false>
struct warp_fragments {
  static_assert(!kBiased || (dtype_of<C>::value == PA_DTYPE_INT8 &&
                             dtype_of<T>::value == PA_DTYPE_FLOAT16),
                "biased codes: int8 into float16");
  static constexpr int kLoads = 32 / (16 * (int)sizeof(C));
  const unsigned char *tile;
  int row_bytes, lane;
  template <int kLo, int kHi>
  __device__ static __forceinline__ uint32_t pair(uint32_t codes) {
    if constexpr (kBiased)
      return int8_codes_to_biased_f16x2<kLo, kHi>(codes);
    else
      return codes_to_t2<T, C, kLo, kHi>(codes);
  }
  __device__ __forceinline__ void scores_k(uint32_t (&b)[kLoads][4], int ks) const {
    if constexpr (sizeof(C) == 2) {
      const int key = (lane / 16) * 8 + lane % 8, channel = ks * 16 + (lane / 8) % 2 * 8;
      ldmatrix_x4(b[0], tile + key * row_bytes + channel * 2);
    } else {
      // codes[2s + h]: keys 8h + lane / 4, channels 16 (ks + s) + 4 (lane % 4) + 0..3
      uint32_t codes[4];
      ldmatrix_x4(codes, tile + (lane % 16) * row_bytes + ks * 16 + (lane / 16) * 16);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        b[i / 2][i % 2 * 2] = pair<0, 1>(codes[i]);
        b[i / 2][i % 2 * 2 + 1] = pair<2, 3>(codes[i]);
      }
    }
  }
  __device__ __forceinline__ void values_v(uint32_t (&b)[kLoads][4], int n) const {
    if constexpr (sizeof(C) == 2) {
      const int key = (lane / 8) % 2 * 8 + lane % 8, channel = n * 8 + (lane / 16) * 8;
      ldmatrix_x4_trans(b[0], tile + key * row_bytes + channel * 2);
    } else {
      // codes[2s + h]: keys 8h + 2 (lane % 4) + 0..1, channels 8n + 16s + 2 (lane / 4) + 0..1:
      // bytes 0 and 2 are one channel's pair of keys, bytes 1 and 3 the next channel's
      uint32_t codes[4];
      ldmatrix_x4_trans(codes, tile + (lane % 16) * row_bytes + n * 8 + (lane / 16) * 16);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        b[i / 2][i % 2] = pair<0, 2>(codes[i]);
        b[i / 2][2 + i % 2] = pair<1, 3>(codes[i]);
      }
    }
  }
  // Channels c..c+7 of a Q row (c % 8 == 0) into its shared row, in the order scores_k reads K.
  __device__ static __forceinline__ void store_q(T *row, int c, uint4 v) {
    if constexpr (sizeof(C) == 2) {
      *reinterpret_cast<uint4 *>(row + c) = v;
    } else {  // channel pair 2i of a block goes to index pair i, pair 2i + 1 to index pair 4 + i
      T *block = row + (c & ~15) + (c & 8) / 2;
      *reinterpret_cast<uint2 *>(block) = make_uint2(v.x, v.z);
      *reinterpret_cast<uint2 *>(block + 8) = make_uint2(v.y, v.w);
    }
  }
  // A lane's P·V accumulators into rows group_id (lo) and group_id + 8 (hi), channels in order.
  template <int kOutTiles>
  __device__ static __forceinline__ void store_out(float *lo, float *hi,
                                                   const float (&acc)[kOutTiles][4], int col) {
#pragma unroll
    for (int n = 0; n < kOutTiles; n++) {
      if constexpr (sizeof(C) == 2) {
        *reinterpret_cast<float2 *>(lo + n * 8 + col) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2 *>(hi + n * 8 + col) = make_float2(acc[n][2], acc[n][3]);
      } else if (n % 2 == 0) {
        *reinterpret_cast<float4 *>(lo + n * 8 + 2 * col) =
            make_float4(acc[n][0], acc[n + 1][0], acc[n][1], acc[n + 1][1]);
        *reinterpret_cast<float4 *>(hi + n * 8 + 2 * col) =
            make_float4(acc[n][2], acc[n + 1][2], acc[n][3], acc[n + 1][3]);
      }
    }
  }
};

}  // namespace detail
}  // namespace pa
