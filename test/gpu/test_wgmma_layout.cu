/* The wgmma building blocks of the Hopper PREFILL kernels (cuda/prefill/prefill_hopper_kernel.cuh)
 * and of the Hopper LATENT kernel (cuda/latent/latent_hopper_kernel.cuh) alone, against CPU loops,
 * so that a wrong swizzle, descriptor or fragment layout shows here by itself rather than as a wrong
 * attention output: two warpgroups, a 128-row Q tile, 64-key K and V tiles stored at their swizzled
 * places, then for each warpgroup S = Q K^T with Q as register fragments and from shared memory
 * (hopper_scores), and O = P V with P built into A fragments by prefill_p_fragment
 * (hopper_add_values); LATENT's: S 32 keys at a time with Q and K from shared memory
 * (latent_hopper_scores, wgmma m64n32k16, K from row 0 or 32 of its tile), and O = P V in two
 * 32-key halves (hopper_issue_values over two k-steps) with each half's P stored into its panel
 * (latent_hopper_store_p) and read back as A fragments (latent_hopper_load_p); and those of the
 * whole-tile LATENT kernel (cuda/latent/latent_whole_kernel.cuh): S over 64 keys with Q and K from
 * shared memory in two batches of k-steps (hopper_issue_scores_shared, wgmma m64n64k16), O = P V
 * over four k-steps with P stored into one swizzled panel (latent_whole_store_p) and read back by
 * hopper_load_a_fragment. For
 * 64, 128 and 256 channels in fp16 and bf16 (the PREFILL kernel is built for 128 and 256, LATENT's
 * for 576; the others show the blocks are right there too); and the PREFILL kernel's 128-key tiles
 * (16-bit caches at 128 channels: S with wgmma m64n128k16 over 128-row K, Q as registers and from
 * shared memory, P V over 8 k-steps of a 128-row V), which leave out LATENT's blocks (64 keys).
 * The PREFILL tiles sit where the kernel puts them (hopper_smem: the last Q slot, the last stage's
 * K and V, so every descriptor starts at a real offset of the kernel's layout), LATENT's P panels
 * after that layout, and every other byte of shared memory holds NaN, so that an operand read that
 * strays outside its tile (a leading or stride byte offset the hardware uses where the layout
 * assumed it unused, as it may when a row is one 128-byte swizzle atom wide) turns results into
 * NaN. The values are small multiples of powers of two, so every product and sum is exact: results
 * must match bit for bit. The first mismatch (row, column, expected, actual) is printed.
 * Runs on compute capability 9.0 only (the sm_90a cubin); exits 77 (skipped) elsewhere. */
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include <cuda_runtime.h>

#include "../../cuda/latent/latent_whole_kernel.cuh"
#include "../../cuda/prefill/prefill_hopper_kernel.cuh"
#include "sm90a_device.h"

using namespace pa::detail;

namespace {

constexpr int kQRows = 128, kThreads = 256;

// LATENT's P panels (1024-byte aligned for the swizzle) after the PREFILL kernel's layout, which
// hopper_geometry gives for any 16-bit type
template <int D>
constexpr int p_panels_offset() {
  return (hopper_geometry<__half, D>::kSmemBytes - 1024 + 1023) / 1024 * 1024;
}
constexpr int kLatentPanelBytes = latent_hopper_geometry::kPanelBytes;  // one half's P
template <int D>
constexpr int smem_bytes() {
  return p_panels_offset<D>() + 4 * kLatentPanelBytes + 1024;  // + two P panels per warpgroup
}

#if PA_SM90A
// LATENT's blocks over the 64-key tiles of layout_kernel (its tiles, rows and P).
template <typename T, int D>
__device__ void latent_blocks(unsigned char *q_tile, unsigned char *k_tile, unsigned char *v_tile,
                              unsigned char *p_panels, const float *p, float *s_n32,
                              float *o_panel) {
  constexpr int kKeys = 64;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, col = (lane % 4) * 2;
  auto row_of = [&](int i) { return wg * 64 + warp * 16 + g + 8 * (i / 2); };
  // LATENT: S in two 32-key halves (K from row 0 or 32 of its tile); P of each half into its own
  // panel (latent_p_offset's layout), then O = P V as two 32-key halves with P read back from the
  // panels, over 256 value channels of which the first D are compared
  unsigned char *p_panel = p_panels + wg * 2 * kLatentPanelBytes;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    float half_score[4][4];
    latent_hopper_scores<T, D / 16>(half_score, shared_address(q_tile), kQRows, wg * 64,
                                    shared_address(k_tile) + 32 * half * 128, kKeys);
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int key = 32 * half + 8 * j + col + (i & 1);
        s_n32[row_of(i) * kKeys + key] = half_score[j][i];
        half_score[j][i] = p[row_of(i) * kKeys + key];
      }
    latent_hopper_store_p<T>(p_panel + half * kLatentPanelBytes, half_score);
  }
  __syncwarp();
  named_barrier_sync(1 + wg, 128);  // the warpgroup's P panels are written
  uint32_t p_half[2][2][4];
#pragma unroll
  for (int half = 0; half < 2; half++)
#pragma unroll
    for (int s = 0; s < 2; s++)
      latent_hopper_load_p(p_panel + half * kLatentPanelBytes, s, p_half[half][s]);
  float out[32][4];
#pragma unroll
  for (int n = 0; n < 32; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) out[n][i] = 0.0f;
  wgmma_fence();
#pragma unroll
  for (int half = 0; half < 2; half++)
    hopper_issue_values<T, 256, 2>(out, p_half[half], shared_address(v_tile) + 32 * half * 128,
                                   kKeys, 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(out);
  wgmma_fence_operands(p_half[0]);
  wgmma_fence_operands(p_half[1]);
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) o_panel[row_of(i) * D + 8 * n + col + (i & 1)] = out[n][i];
}

// The whole-tile kernel's blocks over the same tiles: S over all 64 keys in two batches of k-steps
// (the kernel's low panels, then the rest), P into one panel per warpgroup (where latent_blocks'
// panels were), then O = P V with P read back from it.
template <typename T, int D>
__device__ void latent_whole_blocks(unsigned char *q_tile, unsigned char *k_tile,
                                    unsigned char *v_tile, unsigned char *p_panels,
                                    const float *p, float *s_whole, float *o_whole) {
  constexpr int kKeys = 64;
  static_assert(latent_whole_geometry::kPanelBytes == 2 * kLatentPanelBytes,
                "a warpgroup's P panel where latent_blocks put its two");
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, col = (lane % 4) * 2;
  auto row_of = [&](int i) { return wg * 64 + warp * 16 + g + 8 * (i / 2); };
  float score[kKeys / 8][4];
  wgmma_fence();
  hopper_issue_scores_shared<T, kKeys, 0, D / 32>(score, shared_address(q_tile), kQRows, wg * 64,
                                                  shared_address(k_tile));
  hopper_issue_scores_shared<T, kKeys, D / 32, D / 16>(score, shared_address(q_tile), kQRows,
                                                       wg * 64, shared_address(k_tile));
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(score);
#pragma unroll
  for (int j = 0; j < kKeys / 8; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int key = 8 * j + col + (i & 1);
      s_whole[row_of(i) * kKeys + key] = score[j][i];
      score[j][i] = p[row_of(i) * kKeys + key];
    }
  unsigned char *p_panel = p_panels + wg * latent_whole_geometry::kPanelBytes;
  named_barrier_sync(1 + wg, 128);  // latent_blocks' reads of these panels are done
  uint32_t p_stored[kKeys / 16][4];
#pragma unroll
  for (int s = 0; s < kKeys / 16; s++) prefill_p_fragment<T>(score, s, p_stored[s]);
  latent_whole_store_p(p_panel, p_stored);
  __syncwarp();
  named_barrier_sync(1 + wg, 128);  // the warpgroup's P panel is written
  uint32_t p_frag[kKeys / 16][4];
#pragma unroll
  for (int s = 0; s < kKeys / 16; s++) hopper_load_a_fragment(p_panel, 64, 0, s, p_frag[s]);
  float out[32][4];
#pragma unroll
  for (int n = 0; n < 32; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) out[n][i] = 0.0f;
  wgmma_fence();
  hopper_issue_values<T, 256, kKeys / 16>(out, p_frag, shared_address(v_tile), kKeys, 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(out);
  wgmma_fence_operands(p_frag);
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) o_whole[row_of(i) * D + 8 * n + col + (i & 1)] = out[n][i];
}
#endif

template <typename T, int D, int kKeys>
__global__ void __launch_bounds__(kThreads) layout_kernel(const T *q, const T *k, const T *v,
                                                          const float *p, float *s_registers,
                                                          float *s_shared, float *o,
                                                          float *s_n32, float *o_panel,
                                                          float *s_whole, float *o_whole) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using G = hopper_geometry<T, D>;
  const hopper_smem<T, D> S = {smem_raw + ((1024u - (shared_address(smem_raw) & 1023u)) & 1023u)};
  // 0xffff is NaN in fp16 and bf16 (and as fp32): everything outside the tiles
  for (int i = threadIdx.x; i < (smem_bytes<D>() - 1024) / 4; i += kThreads)
    reinterpret_cast<uint32_t *>(S.base)[i] = 0xffffffffu;
  __syncthreads();
  unsigned char *q_tile = S.q(G::kQSlots - 1);
  unsigned char *k_tile = S.k_tile(G::kStages - 1);
  unsigned char *v_tile = S.v_tile(G::kStages - 1);
  unsigned char *p_panels = S.base + p_panels_offset<D>();  // [warpgroup][half][P panel]
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kQRows * kChunks; i += kThreads)
    *reinterpret_cast<uint4 *>(q_tile + swizzle128_chunk_offset(kQRows, i / kChunks, i % kChunks)) =
        *reinterpret_cast<const uint4 *>(q + i * 8);
  for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreads) {
    const int offset = swizzle128_chunk_offset(kKeys, i / kChunks, i % kChunks);
    *reinterpret_cast<uint4 *>(k_tile + offset) = *reinterpret_cast<const uint4 *>(k + i * 8);
    *reinterpret_cast<uint4 *>(v_tile + offset) = *reinterpret_cast<const uint4 *>(v + i * 8);
  }
  fence_async_proxy();
  __syncthreads();

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, col = (lane % 4) * 2;
  auto row_of = [&](int i) { return wg * 64 + warp * 16 + g + 8 * (i / 2); };
  uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int s = 0; s < D / 16; s++) hopper_load_a_fragment(q_tile, kQRows, wg * 64, s, q_frag[s]);
  constexpr int kNTiles = kKeys / 8, kKeySteps = kKeys / 16;
  float score[kNTiles][4];
  hopper_scores<T, D, true, kKeys>(score, q_frag, shared_address(q_tile), kQRows, wg * 64,
                                   shared_address(k_tile));
#pragma unroll
  for (int j = 0; j < kNTiles; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) s_registers[row_of(i) * kKeys + 8 * j + col + (i & 1)] = score[j][i];
  hopper_scores<T, D, false, kKeys>(score, q_frag, shared_address(q_tile), kQRows, wg * 64,
                                    shared_address(k_tile));
#pragma unroll
  for (int j = 0; j < kNTiles; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) s_shared[row_of(i) * kKeys + 8 * j + col + (i & 1)] = score[j][i];

  // P in the accumulator layout of S, then as A fragments
#pragma unroll
  for (int j = 0; j < kNTiles; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) score[j][i] = p[row_of(i) * kKeys + 8 * j + col + (i & 1)];
  uint32_t p_frag[kKeySteps][4];
#pragma unroll
  for (int s = 0; s < kKeySteps; s++) prefill_p_fragment<T>(score, s, p_frag[s]);
  auto values_into = [&](float *dst) {  // O = P V (P in p_frag), this warpgroup's rows of dst
    float out[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out[n][i] = 0.0f;
    hopper_add_values<T, D, kKeySteps>(out, p_frag, shared_address(v_tile));
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) dst[row_of(i) * D + 8 * n + col + (i & 1)] = out[n][i];
  };
  values_into(o);
  if constexpr (kKeys == 64) {
    latent_blocks<T, D>(q_tile, k_tile, v_tile, p_panels, p, s_n32, o_panel);
    latent_whole_blocks<T, D>(q_tile, k_tile, v_tile, p_panels, p, s_whole, o_whole);
  }
#endif
}

template <typename T>
T to_t(float x);
template <>
__half to_t<__half>(float x) {
  return __float2half(x);
}
template <>
__nv_bfloat16 to_t<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

// Compares got with want (rows x cols), printing the first mismatch; 1 when equal.
int compare(const char *what, const std::vector<float> &want, const std::vector<float> &got,
            int cols) {
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); i++)
    if (want[i] != got[i]) {
      if (!mismatches)
        fprintf(stderr, "FAIL %s: first mismatch at row %zu, column %zu: expected %g, got %g\n",
                what, i / cols, i % cols, want[i], got[i]);
      mismatches++;
    }
  if (mismatches) fprintf(stderr, "     %s: %d of %zu mismatch\n", what, mismatches, want.size());
  else
    fprintf(stderr, "ok   %s\n", what);
  return mismatches == 0;
}

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

template <typename T, int D, int kKeys = 64>
int check(const char *type_name, unsigned seed) {
  srand(seed);
  // multiples of 1/4 in [-1, 1] (Q, K, V) and of 1/8 in [0, 1] (P): exact products and sums
  auto quarter = [] { return (float)(rand() % 9 - 4) / 4.0f; };
  std::vector<float> q(kQRows * D), k(kKeys * D), v(kKeys * D), p(kQRows * kKeys);
  for (float &x : q) x = quarter();
  for (float &x : k) x = quarter();
  for (float &x : v) x = quarter();
  for (float &x : p) x = (float)(rand() % 9) / 8.0f;
  std::vector<T> q_t(q.size()), k_t(k.size()), v_t(v.size());
  for (size_t i = 0; i < q.size(); i++) q_t[i] = to_t<T>(q[i]);
  for (size_t i = 0; i < k.size(); i++) k_t[i] = to_t<T>(k[i]);
  for (size_t i = 0; i < v.size(); i++) v_t[i] = to_t<T>(v[i]);
  std::vector<float> s_want(kQRows * kKeys, 0.0f), o_want(kQRows * D, 0.0f);
  for (int r = 0; r < kQRows; r++) {
    for (int key = 0; key < kKeys; key++)
      for (int c = 0; c < D; c++) s_want[r * kKeys + key] += q[r * D + c] * k[key * D + c];
    for (int c = 0; c < D; c++)
      for (int key = 0; key < kKeys; key++) o_want[r * D + c] += p[r * kKeys + key] * v[key * D + c];
  }

  T *dq, *dk, *dv;
  float *dp, *ds_registers, *ds_shared, *do_, *ds_n32, *do_panel, *ds_whole, *do_whole;
  CHECK(cudaMalloc(&dq, q_t.size() * sizeof(T)));
  CHECK(cudaMalloc(&dk, k_t.size() * sizeof(T)));
  CHECK(cudaMalloc(&dv, v_t.size() * sizeof(T)));
  CHECK(cudaMalloc(&dp, p.size() * sizeof(float)));
  CHECK(cudaMalloc(&ds_registers, s_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&ds_shared, s_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&do_, o_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&ds_n32, s_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&do_panel, o_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&ds_whole, s_want.size() * sizeof(float)));
  CHECK(cudaMalloc(&do_whole, o_want.size() * sizeof(float)));
  CHECK(cudaMemcpy(dq, q_t.data(), q_t.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, k_t.data(), k_t.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, v_t.data(), v_t.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dp, p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaFuncSetAttribute(layout_kernel<T, D, kKeys>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D>()));
  layout_kernel<T, D, kKeys><<<1, kThreads, smem_bytes<D>()>>>(
      dq, dk, dv, dp, ds_registers, ds_shared, do_, ds_n32, do_panel, ds_whole, do_whole);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> s_registers(s_want.size()), s_shared(s_want.size()), o(o_want.size());
  std::vector<float> s_n32(s_want.size()), o_panel(o_want.size());
  CHECK(cudaMemcpy(s_n32.data(), ds_n32, s_n32.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o_panel.data(), do_panel, o_panel.size() * sizeof(float),
                   cudaMemcpyDeviceToHost));
  std::vector<float> s_whole(s_want.size()), o_whole(o_want.size());
  CHECK(cudaMemcpy(s_whole.data(), ds_whole, s_whole.size() * sizeof(float),
                   cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o_whole.data(), do_whole, o_whole.size() * sizeof(float),
                   cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(s_registers.data(), ds_registers, s_registers.size() * sizeof(float),
                   cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(s_shared.data(), ds_shared, s_shared.size() * sizeof(float),
                   cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o.data(), do_, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dp);
  cudaFree(ds_registers);
  cudaFree(ds_shared);
  cudaFree(do_);
  cudaFree(ds_n32);
  cudaFree(do_panel);
  cudaFree(ds_whole);
  cudaFree(do_whole);

  char what[96];
  int ok = 1;
  snprintf(what, sizeof what, "%s d%d, %d keys: S = Q K^T, Q in registers", type_name, D, kKeys);
  ok &= compare(what, s_want, s_registers, kKeys);
  snprintf(what, sizeof what, "%s d%d, %d keys: S = Q K^T, Q in shared memory", type_name, D,
           kKeys);
  ok &= compare(what, s_want, s_shared, kKeys);
  snprintf(what, sizeof what, "%s d%d, %d keys: O = P V", type_name, D, kKeys);
  ok &= compare(what, o_want, o, D);
  if (kKeys == 64) {
    snprintf(what, sizeof what, "%s d%d: S = Q K^T, 32 keys at a time (LATENT)", type_name, D);
    ok &= compare(what, s_want, s_n32, kKeys);
    snprintf(what, sizeof what, "%s d%d: O = P V, P through a swizzled panel (LATENT)", type_name,
             D);
    ok &= compare(what, o_want, o_panel, D);
    snprintf(what, sizeof what, "%s d%d: S = Q K^T, two batches of k-steps (LATENT whole tiles)",
             type_name, D);
    ok &= compare(what, s_want, s_whole, kKeys);
    snprintf(what, sizeof what, "%s d%d: O = P V, P through one panel (LATENT whole tiles)",
             type_name, D);
    ok &= compare(what, o_want, o_whole, D);
  }
  return ok;
}

}  // namespace

int main(void) {
  if (!sm90a_device_or_skip()) return 77;
  int ok = 1;
  ok &= check<__half, 64>("fp16", 1);
  ok &= check<__half, 128>("fp16", 2);
  ok &= check<__half, 256>("fp16", 3);
  ok &= check<__nv_bfloat16, 64>("bf16", 4);
  ok &= check<__nv_bfloat16, 128>("bf16", 5);
  ok &= check<__nv_bfloat16, 256>("bf16", 6);
  ok &= check<__half, 128, 128>("fp16", 7);  // the kernel's tiles for 16-bit caches at d128
  ok &= check<__nv_bfloat16, 128, 128>("bf16", 8);
  fprintf(stderr, "wgmma_layout: %s\n", ok ? "all layouts agree" : "FAILED");
  return ok ? 0 : 1;
}
