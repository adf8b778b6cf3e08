// Warpgroup matrix multiply-accumulate (wgmma, sm_90a) and what it needs: shared-memory matrix
// descriptors over 128-byte-swizzled tiles, the issue / commit / wait fences, register
// reallocation between warpgroups (setmaxnreg) and named barriers. Everything that emits an sm_90a
// instruction compiles only in the sm_90a pass (PA_SM90A); other passes see the declarations of
// the layout helpers alone, so a kernel built on these must test PA_SM90A itself and be launched
// only where its plan found an sm_90a cubin.
//
// Tiles: a K- or V-tile (or Q) of R rows x D 16-bit channels is stored as D / 64 panels of
// [R rows][128 bytes], 16-byte chunk c of row r at chunk c ^ (r % 8) of its 128-byte line (the
// 128-byte swizzle; each panel 1024-byte aligned). One layout serves both operand orders:
//   * K-major (the reduction runs along the row: Q and K in S = Q K^T): k-step s (16 channels)
//     starts at panel s / 4, byte 32 (s % 4); 8-row groups are 1024 bytes apart (SBO).
//   * MN-major (V in O += P V, the reduction runs down the rows, the transpose bit set): k-step s
//     (16 keys) starts at row 16 s; panels (64 output channels) are a panel's bytes apart (LBO),
//     8-key groups 1024 bytes (SBO).
// Register fragments (PTX ISA, "wgmma .m64nNk16"): warp w of the warpgroup owns rows 16 w ..
// 16 w + 15; lane l holds, with g = l / 4 and c = 2 (l % 4): accumulator d[j][0..1] = row g,
// columns 8 j + c, + 1; d[j][2..3] = row g + 8, the same columns; the A operand of one k-step
// a[0] = (row g, k c, c + 1), a[1] = (row g + 8, k c, c + 1), a[2] = (row g, k 8 + c, + 1),
// a[3] = (row g + 8, k 8 + c, + 1), two 16-bit values per register, the lower k in the low half:
// the layouts of mma.sync m16n8k16 (tensor_core.cuh) for each warp's 16 rows.
#pragma once

#include <stdint.h>

#include "numeric.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PA_SM90A 1
#else
#define PA_SM90A 0
#endif

namespace pa {
namespace detail {

// Byte offset of 16-byte chunk `chunk` (0 .. D / 8 - 1) of row `row` in a swizzled tile of
// panel_rows rows (see above).
__host__ __device__ constexpr int swizzle128_chunk_offset(int panel_rows, int row, int chunk) {
  return (chunk / 8) * panel_rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (each encoded >> 4; the start must be 16-byte aligned, every swizzle pattern 1024-byte
// aligned so the base offset is 0). Adding (bytes >> 4) moves the start (addresses stay below
// 2^18, so the 14-bit field does not overflow).
__host__ __device__ constexpr uint64_t wgmma_descriptor(uint32_t shared_addr, uint32_t lbo,
                                                        uint32_t sbo) {
  return (uint64_t)((shared_addr & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
         (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | (uint64_t)1 << 62;
}

// A descriptor plus an offset (>> 4) inside its shared memory window, added to the low word only:
// the start address field is bits 0-13 and a shared address + offset stays below 2^18, so nothing
// carries out of that word (a 64-bit add took two instructions per descriptor, and its carry kept
// the descriptors off the uniform registers)
__host__ __device__ constexpr uint64_t wgmma_descriptor_plus(uint64_t desc, uint32_t offset) {
  return (desc & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)desc + offset);
}

#if PA_SM90A

// A value every lane of the warp holds, as the compiler can tell (lane 0's, broadcast): the
// descriptors computed from it then live in uniform registers, and each wgmma issues without
// moving its descriptor there first (R2UR)
__device__ __forceinline__ uint32_t warp_uniform(uint32_t v) {
  return __shfl_sync(0xffffffffu, v, 0);
}

// Before the first wgmma of a batch whose accumulators or A registers other instructions wrote.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N of this warpgroup's committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// The compiler sees an asynchronous wgmma's registers as written when it is issued: after the
// wait, these pin each register so that no read is hoisted above the wait and no operand register
// is reused while the tensor cores may still read it.
__device__ __forceinline__ void wgmma_fence_operand(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ void wgmma_fence_operand(uint32_t &x) {
  asm volatile("" : "+r"(x)::"memory");
}
template <int A, int B>
__device__ __forceinline__ void wgmma_fence_operands(float (&x)[A][B]) {
#pragma unroll
  for (int i = 0; i < A; i++)
#pragma unroll
    for (int j = 0; j < B; j++) wgmma_fence_operand(x[i][j]);
}
template <int A, int B>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&x)[A][B]) {
#pragma unroll
  for (int i = 0; i < A; i++)
#pragma unroll
    for (int j = 0; j < B; j++) wgmma_fence_operand(x[i][j]);
}

// An m64nNk16 wgmma's accumulators d[N / 8][4] (N / 2 fp32 registers per thread): their operand
// numbers, which open the instruction's register list, and their constraints.
#define PA_WGMMA_D16_TEXT "%0, %1, %2, %3, %4, %5, %6, %7"
#define PA_WGMMA_D32_TEXT PA_WGMMA_D16_TEXT ", %8, %9, %10, %11, %12, %13, %14, %15"
#define PA_WGMMA_D64_TEXT \
  PA_WGMMA_D32_TEXT ", %16, %17, %18, %19, %20, %21, %22, %23" \
                    ", %24, %25, %26, %27, %28, %29, %30, %31"
#define PA_WGMMA_D128_TEXT \
  PA_WGMMA_D64_TEXT ", %32, %33, %34, %35, %36, %37, %38, %39" \
                    ", %40, %41, %42, %43, %44, %45, %46, %47" \
                    ", %48, %49, %50, %51, %52, %53, %54, %55" \
                    ", %56, %57, %58, %59, %60, %61, %62, %63"
#define PA_WGMMA_D16_OUT \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
      "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
#define PA_WGMMA_D32_OUT \
  PA_WGMMA_D16_OUT, "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
#define PA_WGMMA_D64_OUT \
  PA_WGMMA_D32_OUT, \
      "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
      "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define PA_WGMMA_D128_OUT \
  PA_WGMMA_D64_OUT, \
      "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
      "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
      "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
      "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
      "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
      "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
      "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
      "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])

// A and B from shared memory (descriptors); kAccumulate 1: D = A B + D, 0: D = A B; kTransposeA
// (N = 16 and 32) A's major-ness.
#define PA_WGMMA_SS_M64N64K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D64_TEXT "}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : PA_WGMMA_D64_OUT \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate))

#define PA_WGMMA_SS_M64N128K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D128_TEXT "}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
               : PA_WGMMA_D128_OUT \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate))

#define PA_WGMMA_SS_M64N32K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D32_TEXT "}, %16, %17, p, 1, 1, %19, 0;\n}\n" \
               : PA_WGMMA_D32_OUT \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate), "n"(kTransposeA))

#define PA_WGMMA_SS_M64N16K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D16_TEXT "}, %8, %9, p, 1, 1, %11, 0;\n}\n" \
               : PA_WGMMA_D16_OUT \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate), "n"(kTransposeA))

// A from registers (four 32-bit fragments), B from shared memory, kTransposeB its major-ness.
#define PA_WGMMA_RS_M64N64K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D64_TEXT "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
               : PA_WGMMA_D64_OUT \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kAccumulate), \
                 "n"(kTransposeB))

#define PA_WGMMA_RS_M64N128K16(TYPE) \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n" \
               " wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" \
               PA_WGMMA_D128_TEXT "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n" \
               : PA_WGMMA_D128_OUT \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kAccumulate), \
                 "n"(kTransposeB))

// One wgmma.m64nNk16 with fp32 accumulators for 16-bit inputs T (__half or __nv_bfloat16).
// kAccumulate 0: D = A B (the accumulators' old values are ignored).
template <typename T>
struct wgmma_m64k16 {
  // A from shared memory (K-major), B K-major; N = 64 or 128 by the accumulators' size.
  template <int kAccumulate>
  __device__ static __forceinline__ void shared_a(float (&d)[8][4], uint64_t desc_a,
                                                  uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_SS_M64N64K16("f16");
    else
      PA_WGMMA_SS_M64N64K16("bf16");
  }
  template <int kAccumulate>
  __device__ static __forceinline__ void shared_a(float (&d)[16][4], uint64_t desc_a,
                                                  uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_SS_M64N128K16("f16");
    else
      PA_WGMMA_SS_M64N128K16("bf16");
  }
  // A and B from shared memory, B K-major, A K-major (kTransposeA 0) or M-major (1); N = 16 or
  // 32 by the accumulators' size.
  template <int kAccumulate, int kTransposeA = 0>
  __device__ static __forceinline__ void shared_ab(float (&d)[4][4], uint64_t desc_a,
                                                   uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_SS_M64N32K16("f16");
    else
      PA_WGMMA_SS_M64N32K16("bf16");
  }
  template <int kAccumulate, int kTransposeA = 0>
  __device__ static __forceinline__ void shared_ab(float (&d)[2][4], uint64_t desc_a,
                                                   uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_SS_M64N16K16("f16");
    else
      PA_WGMMA_SS_M64N16K16("bf16");
  }
  // A from registers; B K-major (kTransposeB 0) or N-major (1); N = 64 or 128.
  template <int kAccumulate, int kTransposeB>
  __device__ static __forceinline__ void registers_a(float (&d)[8][4], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_RS_M64N64K16("f16");
    else
      PA_WGMMA_RS_M64N64K16("bf16");
  }
  template <int kAccumulate, int kTransposeB>
  __device__ static __forceinline__ void registers_a(float (&d)[16][4], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16)
      PA_WGMMA_RS_M64N128K16("f16");
    else
      PA_WGMMA_RS_M64N128K16("bf16");
  }
};

#undef PA_WGMMA_SS_M64N64K16
#undef PA_WGMMA_SS_M64N128K16
#undef PA_WGMMA_SS_M64N32K16
#undef PA_WGMMA_SS_M64N16K16
#undef PA_WGMMA_RS_M64N64K16
#undef PA_WGMMA_RS_M64N128K16
#undef PA_WGMMA_D16_TEXT
#undef PA_WGMMA_D32_TEXT
#undef PA_WGMMA_D64_TEXT
#undef PA_WGMMA_D128_TEXT
#undef PA_WGMMA_D16_OUT
#undef PA_WGMMA_D32_OUT
#undef PA_WGMMA_D64_OUT
#undef PA_WGMMA_D128_OUT

// Register reallocation between warpgroups: every warp of a warpgroup runs the same one, with the
// kernel's register count fixed at entry (__launch_bounds__(threads, 1)).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// Named barrier `id` (1..15; 0 is __syncthreads) among `threads` threads (a multiple of 32): wait
// for the others, or only arrive (a signal to threads that wait).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The same wait, returning whether `pred` holds in every participating thread (a uniform choice).
__device__ __forceinline__ bool named_barrier_and(int id, int threads, bool pred) {
  uint32_t all;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.u32 p, %1, 0;\n"
      " bar.red.and.pred p, %2, %3, p;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(all)
      : "r"((uint32_t)pred), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}

// Four 8x8 matrices of 16-bit elements from the accumulator layout into shared memory: lane l
// holds elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i in r[i], and gives the
// address of row l % 8 of matrix l / 8 (ldmatrix_x4's transpose: sm_90 and newer).
__device__ __forceinline__ void stmatrix_x4(void *row, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  const uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

#endif  // PA_SM90A

}  // namespace detail
}  // namespace pa
