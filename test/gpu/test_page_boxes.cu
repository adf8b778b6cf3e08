/* The copy engine's page boxes alone (kv_page_maps, cuda/common/bulk_copy.cuh), so that a wrong
 * tensor map, box coordinate or swizzle shows here rather than as a wrong attention output: the
 * launchers' plan_step_maps and encode_kv_page_maps over caches of hashed 16-bit values (keys,
 * and values where PREFILL has them: each through its own map), then the boxes of one page run
 * (16 rows of one KV head in one block, every 64 channels) into a 1024-byte aligned shared tile,
 * compared element by element with where the cp.async producers put the same rows
 * (swizzle128_chunk_offset over panels of 16 rows). Channels past head_size must land as zeros,
 * and the shared tile is filled with another pattern first. Geometries: PREFILL's (head sizes 96
 * and 128, 1 to 8 KV heads, pages of 16, 64 and 256 rows) and LATENT's (576 channels, one head),
 * each at several (head, page row, block) coordinates, the last block included.
 * Runs on compute capability 9.0 only (the sm_90a cubin); exits 77 (skipped) elsewhere. */
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include <cuda_runtime.h>

#include "../../cuda/common/wgmma.cuh"
#include "../../cuda/prefill/launch_row_blocks.cuh"
#include "sm90a_device.h"

using namespace pa::detail;

namespace {

constexpr int kMaxBoxes = 9;  // 576 channels
constexpr int kTileBytes = kMaxBoxes * kPageBoxBytes;
constexpr uint16_t kPoison = 0xabcd;

__global__ void load_page_run(const __grid_constant__ kv_page_maps maps, bool values, int boxes,
                              int head, int page_row, int block, uint16_t *out) {
#if PA_SM90A
  __shared__ __align__(1024) unsigned char tile[kTileBytes];
  __shared__ uint64_t landed;
  uint16_t *tile16 = reinterpret_cast<uint16_t *>(tile);
  for (int i = threadIdx.x; i < kTileBytes / 2; i += blockDim.x) tile16[i] = kPoison;
  if (threadIdx.x == 0) {
    mbarrier_init(&landed, 1);
    mbarrier_init_fence();
  }
  fence_async_proxy();  // the poison (generic proxy) before the copy engine's writes
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_expect_bytes(&landed, boxes * kPageBoxBytes);
    for (int b = 0; b < boxes; b++)
      page_box_load(tile + b * kPageBoxBytes, values ? &maps.v : &maps.k, &landed,
                    b * kPageBoxChannels, head, page_row, block);
    mbarrier_arrive(&landed);
  }
  mbarrier_wait(&landed, 0);
  for (int i = threadIdx.x; i < kTileBytes / 2; i += blockDim.x) out[i] = tile16[i];
#endif
}

uint16_t value_at(int64_t element) {  // distinct across the caches, never the poison
  const uint16_t v = (uint16_t)((element * 2654435761u) >> 7) | 1u;
  return v == kPoison ? 1u : v;
}

// with_values: a value cache beside the key cache (PREFILL), each checked through its own map.
bool check(const char *name, int head_size, int kv_heads, int block_size, int num_blocks,
           bool with_values, int seed) {
  paged_kv_layout kv = {};
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  while ((1 << kv.block_shift) < block_size) kv.block_shift++;
  kv.max_blocks_per_seq = num_blocks;
  kv.kv_num_heads = kv_heads;
  kv.head_size = head_size;
  const size_t elements = (size_t)num_blocks * block_size * kv_heads * head_size;
  const int caches = with_values ? 2 : 1;  // the value cache's elements follow the key cache's
  std::vector<uint16_t> cache(caches * elements);
  for (size_t i = 0; i < cache.size(); i++) cache[i] = value_at((int64_t)i);
  uint16_t *d_cache = nullptr, *d_out = nullptr;
  if (cudaMalloc(&d_cache, cache.size() * 2) != cudaSuccess ||
      cudaMalloc(&d_out, kTileBytes) != cudaSuccess) {
    fprintf(stderr, "%s: cudaMalloc failed\n", name);
    return false;
  }
  cudaMemcpy(d_cache, cache.data(), cache.size() * 2, cudaMemcpyHostToDevice);
  kv_page_map_encoder encoder = nullptr;
  kv_page_maps maps;
  if (plan_step_maps({true, with_values, false}, kv, 0, 0, 0, 0, row_geometry{}, name,
                     &encoder) != PA_SUCCESS ||
      encode_kv_page_maps(encoder, kv, d_cache, with_values ? d_cache + elements : nullptr, name,
                          &maps) != PA_SUCCESS) {
    char why[512];
    pa_last_error_message(why, sizeof why);
    fprintf(stderr, "%s\n", why);
    return false;
  }
  const int boxes = (head_size + kPageBoxChannels - 1) / kPageBoxChannels;
  srand((unsigned)seed);
  bool ok = true;
  for (int trial = 0; trial < 6 * caches && ok; trial++) {
    const bool values = trial % caches == 1;
    const int head = trial < caches ? kv_heads - 1 : rand() % kv_heads;
    const int page_row = (rand() % (block_size / kPageBoxRows)) * kPageBoxRows;
    const int block = trial < caches ? num_blocks - 1 : rand() % num_blocks;
    load_page_run<<<1, 128>>>(maps, values, boxes, head, page_row, block, d_out);
    std::vector<uint16_t> tile(kTileBytes / 2);
    const cudaError_t err = cudaMemcpy(tile.data(), d_out, kTileBytes, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
      fprintf(stderr, "%s: %s\n", name, cudaGetErrorString(err));
      return false;
    }
    for (int r = 0; r < kPageBoxRows && ok; r++)
      for (int c = 0; c < boxes * kPageBoxChannels && ok; c++) {
        const size_t at = (swizzle128_chunk_offset(kPageBoxRows, r, c / 8) + (c % 8) * 2) / 2;
        const size_t source =
            (((size_t)block * block_size + page_row + r) * kv_heads + head) * head_size + c;
        const uint16_t expected = c < head_size ? cache[(values ? elements : 0) + source] : 0;
        if (tile[at] != expected) {
          fprintf(stderr,
                  "%s: %s, head %d, page row %d, block %d: row %d channel %d holds 0x%04x, "
                  "expected 0x%04x\n",
                  name, values ? "values" : "keys", head, page_row, block, r, c, tile[at],
                  expected);
          ok = false;
        }
      }
  }
  cudaFree(d_cache);
  cudaFree(d_out);
  fprintf(stderr, "%s: %s\n", name, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(void) {
  if (!sm90a_device_or_skip()) return 77;
  bool ok = true;
  ok &= check("d128, 8 heads, pages of 16", 128, 8, 16, 37, true, 1);
  ok &= check("d128, 1 head, pages of 256", 128, 1, 256, 5, true, 2);
  ok &= check("d96, 2 heads, pages of 64", 96, 2, 64, 11, true, 3);
  ok &= check("latent d576, pages of 16", 576, 1, 16, 29, false, 4);
  ok &= check("latent d576, pages of 64", 576, 1, 64, 7, false, 5);
  fprintf(stderr, "page_boxes: %s\n", ok ? "every box where the producers put its rows" : "FAILED");
  return ok ? 0 : 1;
}
