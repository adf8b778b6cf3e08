// The producer side of the mma.sync kernels (DECODE's and PREFILL's): the 64-key K/V tiles of one
// (sequence, KV head) gathered from the pages into a cp.async stage ring (cp_async_tile_ring).
//
// Thread threadIdx.x = run * kChunks + chunk (of kThreads) owns 16-byte chunk `chunk` of the
// kRunRows consecutive rows starting at row run * kRunRows of every tile. Tiles start at multiples
// of 64 keys and kRunRows <= 16 <= block_size, so a run never crosses a page: a tile costs a thread
// one block-table entry, and its rows are a fixed stride apart in the cache. Whatever does not
// change from tile to tile is worked out once, by the constructor, or read from the layout's byte
// strides, so that issuing a tile is the entry's check, one multiply-add and an add per row
// (recomputed per tile, it was 44 % of the instructions of the 8-bit DECODE kernel's tile loop,
// which is bound by instruction issue).
//
// Tiles are numbered from first_tile, the tile of key lo: tile t holds keys
// [64 (first_tile + t), +64), and only tiles 0 .. last_tile (the tile of key hi - 1) are issued.
// Rows outside the keys [lo, hi) or in an unmapped block are zero-filled (so 0 * V stays finite)
// and flagged not admitted (a byte per key per stage); chunks at or past the row's real length
// zero-fill the row's DMAX pad. A chunk not loaded keeps the address of a row of its own block or
// of block 0 (inside any cache that has a block), though src-size 0 reads nothing.
#pragma once

#include <assert.h>
#include <stdint.h>

#include "paged_kv.cuh"
#include "tensor_core.cuh"

namespace pa {
namespace detail {

// kRowBytes: a row of the shared tiles (DMAX channels and a pad). kEntriesBeforeWait: the
// block-table entries through L2 (load_step_input), for a kernel whose first ones are read before
// its chained wait (run_tiles' before_loads).
template <typename C, int DMAX, int kThreads, int kRowBytes, int kStages,
          bool kEntriesBeforeWait = false>
struct kv_tile_loader {
  static constexpr int kTileKeys = 64;
  static constexpr int kChunks = DMAX * (int)sizeof(C) / 16;
  static constexpr int kRunRows = kTileKeys * kChunks / kThreads;
  static_assert(kRunRows >= 1 && kRunRows <= 16, "a run of rows must fit in a 16-key page");
  static_assert(kRunRows <= kChunks, "a run's first kRunRows threads flag its rows, one each");
  static constexpr int kStageBytes = 2 * kTileKeys * kRowBytes;  // K rows, then V rows
  static constexpr uint32_t kAllRows = (1u << kRunRows) - 1u;

  const unsigned char *k_cache, *v_cache;
  const int32_t *table_row;
  paged_kv_layout kv;
  int64_t head_chunk;  // bytes from a cache row's start to this thread's chunk of its KV head
  int64_t run_key0;    // the first key of this thread's run in tile 0
  int64_t first_tile;  // the tile of key lo: the tiles below are numbered from it
  int lo_in_tile;      // lo - 64 first_tile
  int last_tile;       // the tile of key hi - 1, numbered from first_tile
  // the run's rows at or after lo in tile 0 (bits 0-15), and before hi in last_tile (bits 16-31)
  uint32_t edge_rows;
  unsigned char *stages, *admitted;  // the ring, and its flags (kTileKeys bytes per stage)

  // The keys [lo, hi) of KV head kv_head in the caches; table: the sequence's block-table row.
  __device__ __forceinline__ kv_tile_loader(const void *k, const void *v,
                                            const paged_kv_layout &layout, const int32_t *table,
                                            int kv_head, int64_t lo, int64_t hi,
                                            unsigned char *ring, unsigned char *ring_admitted)
      : k_cache(reinterpret_cast<const unsigned char *>(k)),
        v_cache(reinterpret_cast<const unsigned char *>(v)),
        table_row(table),
        kv(layout),
        stages(ring),
        admitted(ring_admitted) {
    // An empty range issues no tile; PREFILL's empty union is [INT64_MAX, INT64_MIN), whose
    // hi - 1 below would overflow.
    if (hi <= lo) lo = hi = 0;
    assert(kv.row_bytes == (int64_t)kv.kv_num_heads * kv.head_size * (int64_t)sizeof(C));
    const int chunk = threadIdx.x % kChunks, run = threadIdx.x / kChunks;
    const bool real_chunk = chunk * 16 < kv.head_size * (int)sizeof(C);
    head_chunk =
        (int64_t)kv_head * kv.head_size * (int64_t)sizeof(C) + (real_chunk ? chunk * 16 : 0);
    first_tile = lo / kTileKeys;
    lo_in_tile = (int)(lo - first_tile * kTileKeys);
    run_key0 = first_tile * kTileKeys + run * kRunRows;
    last_tile = (int)((hi - 1) / kTileKeys - first_tile);
    const int first_valid = max(0, min(kRunRows, lo_in_tile - run * kRunRows));
    const int64_t last_key0 = run_key0 + (int64_t)last_tile * kTileKeys;
    const int end_valid = (int)max((int64_t)0, min((int64_t)kRunRows, hi - last_key0));
    edge_rows = (kAllRows & ~((1u << first_valid) - 1u)) | ((1u << end_valid) - 1u) << 16;
  }

  // The block-table entry of this thread's run in tile t (-1: the run is past hi), validated only
  // when the tile is issued, so the lookup's latency hides behind a tile of work.
  __device__ __forceinline__ int32_t entry(int t) const {
    const bool inside = t < last_tile || (t == last_tile && edge_rows >> 16 != 0u);
    return inside ? kv_block_entry<kEntriesBeforeWait>(kv, table_row,
                                                       run_key0 + (int64_t)t * kTileKeys)
                  : -1;
  }

  __device__ __forceinline__ void issue(int t, int32_t block_entry) const {
    const int32_t block_id = kv_block_mapped(kv, block_entry);
    uint32_t rows = block_id >= 0 ? kAllRows : 0u;
    if (t == 0) rows &= edge_rows;
    if (t == last_tile) rows &= edge_rows >> 16;
    // the run's first row, in block 0 when unmapped
    const int64_t offset =
        kv_page_row_bytes(kv, max(block_id, 0), (uint32_t)run_key0 + (uint32_t)t * kTileKeys) +
        head_chunk;
    const unsigned char *k_src = k_cache + offset, *v_src = v_cache + offset;
    // chunk and run recomputed here: held across the tile loop, they made PREFILL's kernels spill
    const int chunk = threadIdx.x % kChunks, run = threadIdx.x / kChunks;
    const bool real_chunk = chunk * 16 < kv.head_size * (int)sizeof(C);
    const int stage = t % kStages;
    unsigned char *k_dst = stages + stage * kStageBytes + run * kRunRows * kRowBytes + chunk * 16;
    unsigned char *v_dst = k_dst + kTileKeys * kRowBytes;
#pragma unroll
    for (int i = 0; i < kRunRows; i++) {
      const bool fill = real_chunk && (rows >> i & 1u);
      cp_async_16(k_dst + i * kRowBytes, k_src + i * kv.row_bytes, fill);
      cp_async_16(v_dst + i * kRowBytes, v_src + i * kv.row_bytes, fill);
    }
    // the run's first kRunRows threads flag its rows, one each
    if (chunk < kRunRows) admitted[stage * kTileKeys + run * kRunRows + chunk] = rows >> chunk & 1u;
  }

  // Tiles [begin, end) through the ring: tile t + kStages - 1's loads are in flight while
  // consume(t, stage) computes on tile t; before_loads() runs once the first block-table entries
  // are asked for, before any cache load. Ends with every load landed and the ring free.
  template <typename Consume, typename BeforeLoads = nothing_before_loads>
  __device__ __forceinline__ void run_tiles(int begin, int end, Consume &&consume,
                                            BeforeLoads &&before_loads = BeforeLoads()) const {
    cp_async_tile_ring<kStages>(
        begin, end, [&](int t) { return entry(t); },
        [&](int t, int32_t block_entry) { issue(t, block_entry); }, consume, before_loads);
  }
};

}  // namespace detail
}  // namespace pa
