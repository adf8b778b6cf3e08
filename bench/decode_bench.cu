// pa_bench_decode: the decode sweep of doc/performance.md on the DECODE backend.
//
// For each shape: random cache pool (shuffled block table), one pa_execute first checked against a
// host fp64 oracle on sample rows, then timed with CUDA events (median of >= 100 after warm-up).
// Reports TB/s of the K+V bytes that must be read (window-free, so every cached byte) and the
// percentage of a device-to-device copy measured in the same run (read + write counted), for the
// step timed eagerly (an event pair per step) and as back-to-back CUDA-graph replays (how a serving
// loop runs it, and how bench/anchors.py times the anchors).
// Each row also gives the paged-read ceiling: the same K+V bytes read through the same block table
// by a kernel that does nothing else (16-byte loads, every CTA independent), so "% of ceiling"
// separates the cost of the attention math from the cost of the page-scattered access pattern.
//   pa_bench_decode [--quick] [--graph] [--only TEXT] [--block N]
//     --quick     fewer block sizes and cache types (what tools/gpu-check.sh runs)
//     --graph     only the latency case (B = 1, L = 1k)
//     --only TEXT only the shapes whose label contains TEXT (e.g. for a profiler)
//     --block N   only block size N
// The latency case is followed by its graph floor: the same replays of graphs of empty kernels,
// one alone and two chained like the step's write and attention kernels.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../cuda/common/chained_launch.cuh"
#include "bench_common.cuh"
#include "bench_peaks.cuh"
#include "host_numeric.h"
#include "pagedattn/pagedattn.h"

namespace {

using bench::desc;
using bench::desc_bytes;
using bench::dtype_name;
using bench::fill;
using bench::graph_median_us;
using bench::copy_tbps;
using bench::median_us;

struct shape {
  const char *label;
  int heads, kv_heads, head_size;
  std::vector<int> kv_lens;  // per sequence, the current token included
  int table_keys = 0;        // the block table's width in keys (0: the longest sequence's)
};

struct config {
  shape s;
  int block_size;
  pa_dtype dtype;        // T
  pa_dtype cache_dtype;  // T, int8 or fp8
};

// ---- the paged-read ceiling -------------------------------------------------------------------

constexpr int kCeilingKeys = 64;  // keys per CTA, as a DECODE tile
constexpr int kCeilingThreads = 256;

// One CTA per (sequence, 64-key chunk, KV head), KV heads innermost so neighbouring CTAs read
// neighbouring bytes of a page; XOR of every K and V 16-byte vector, stored only if it hits an
// impossible value (keeps the loads alive).
__global__ void __launch_bounds__(kCeilingThreads) paged_read_kernel(
    const uint4 *k_cache, const uint4 *v_cache, const int32_t *block_table, const int32_t *past,
    int blocks_per_seq, int block_size, int kv_heads, int row_vecs, int chunks_per_seq,
    uint4 *sink) {
  const int kv_head = blockIdx.x % kv_heads;
  const int rest = blockIdx.x / kv_heads;
  const int seq = rest / chunks_per_seq, key0 = rest % chunks_per_seq * kCeilingKeys;
  const int len = past[seq] + 1;
  uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll 4
  for (int i = threadIdx.x; i < kCeilingKeys * row_vecs; i += kCeilingThreads) {
    const int key = key0 + i / row_vecs;
    if (key >= len) break;
    const int64_t block = block_table[(int64_t)seq * blocks_per_seq + key / block_size];
    const int64_t vec =
        ((block * block_size + key % block_size) * kv_heads + kv_head) * row_vecs + i % row_vecs;
    const uint4 x = __ldcs(k_cache + vec), y = __ldcs(v_cache + vec);
    acc.x ^= x.x ^ y.x;
    acc.y ^= x.y ^ y.y;
    acc.z ^= x.z ^ y.z;
    acc.w ^= x.w ^ y.w;
  }
  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == acc.w) sink[0] = acc;
}

// ---- the graph floor of the latency step --------------------------------------------------------

// What a replay of the latency step's graph costs before any work: graphs of kernels that do
// nothing, replayed back to back as time_execute does: one kernel, and two chained as the step's
// write and attention kernels are (the library's own launch_chained and wait_for_previous_kernel:
// the second launched with programmatic stream serialization on compute capability 9.0 and newer,
// waiting for the first, which lets it launch at once).
__global__ void floor_kernel() { pa::detail::wait_for_previous_kernel(); }

double graph_floor_us(cudaStream_t stream, int kernels) {
  int device = 0, major = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return graph_median_us(stream, 10, 5, 200, [&]() {
    CHECK_CUDA(pa::detail::launch_chained(floor_kernel, dim3(1), 128, 0, stream, false));
    if (kernels == 2)  // the latency step's attention grid: 8 KV heads x 16 splits
      CHECK_CUDA(pa::detail::launch_chained(floor_kernel, dim3(128), 128, 0, stream, major >= 9));
  });
}

// ---- one configuration --------------------------------------------------------------------------

struct device_problem {
  config cfg;
  int batch;
  int64_t num_blocks, max_kv;
  int blocks_per_seq;
  std::vector<int32_t> cu, past, table;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  void *dev[PA_NUM_INPUTS];
  void *output;
  float k_scale, v_scale;
  double kv_bytes;  // K + V bytes one step must read
};

void setup(device_problem &p, const config &cfg, uint64_t seed) {
  p.cfg = cfg;
  const shape &s = cfg.s;
  const int bs = cfg.block_size, B = (int)s.kv_lens.size();
  p.batch = B;
  p.max_kv = 0;
  p.num_blocks = 0;
  p.blocks_per_seq = 0;
  for (int L : s.kv_lens) {
    p.max_kv = std::max<int64_t>(p.max_kv, L);
    p.num_blocks += (L + bs - 1) / bs;
    p.blocks_per_seq = std::max(p.blocks_per_seq, (L + bs - 1) / bs);
  }
  p.blocks_per_seq = std::max(p.blocks_per_seq, (s.table_keys + bs - 1) / bs);
  // block ids: a random permutation of the pool, as a serving engine's allocator leaves it
  std::vector<int32_t> ids((size_t)p.num_blocks);
  for (int64_t i = 0; i < p.num_blocks; i++) ids[(size_t)i] = (int32_t)i;
  srand((unsigned)seed);
  for (int64_t i = p.num_blocks - 1; i > 0; i--)
    std::swap(ids[(size_t)i], ids[(size_t)(((int64_t)rand() * 65536 + rand()) % (i + 1))]);
  p.table.assign((size_t)B * p.blocks_per_seq, -1);
  p.cu.resize((size_t)B + 1);
  p.past.resize((size_t)B);
  int64_t next = 0;
  for (int b = 0; b < B; b++) {
    p.cu[(size_t)b] = b;
    p.past[(size_t)b] = s.kv_lens[(size_t)b] - 1;
    for (int j = 0; j < (s.kv_lens[(size_t)b] + bs - 1) / bs; j++)
      p.table[(size_t)b * p.blocks_per_seq + j] = ids[(size_t)next++];
  }
  p.cu[(size_t)B] = B;

  const bool quantized = cfg.cache_dtype != cfg.dtype;
  memset(p.in, 0, sizeof p.in);
  memset(p.out, 0, sizeof p.out);
  p.in[PA_IN_QUERY] = desc(cfg.dtype, 2, B, (int64_t)s.heads * s.head_size);
  p.in[PA_IN_KEY] = p.in[PA_IN_VALUE] = desc(cfg.dtype, 2, B, (int64_t)s.kv_heads * s.head_size);
  p.in[PA_IN_KEY_CACHE] = p.in[PA_IN_VALUE_CACHE] =
      desc(cfg.cache_dtype, 4, p.num_blocks, bs, s.kv_heads, s.head_size);
  p.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, B + 1);
  p.in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, B);
  p.in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, B, p.blocks_per_seq);
  if (quantized) p.in[PA_IN_K_SCALE] = p.in[PA_IN_V_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1);
  p.in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2);
  p.out[PA_OUT_OUTPUT] = p.in[PA_IN_QUERY];

  memset(p.dev, 0, sizeof p.dev);
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (i == PA_IN_ATTENTION_METADATA || !desc_bytes(p.in[i])) continue;
    CHECK_CUDA(cudaMalloc(&p.dev[i], desc_bytes(p.in[i])));
  }
  fill(p.dev[PA_IN_QUERY], (int64_t)B * s.heads * s.head_size, cfg.dtype, 2.0f, seed + 1);
  fill(p.dev[PA_IN_KEY], (int64_t)B * s.kv_heads * s.head_size, cfg.dtype, 1.0f, seed + 2);
  fill(p.dev[PA_IN_VALUE], (int64_t)B * s.kv_heads * s.head_size, cfg.dtype, 1.0f, seed + 3);
  const int64_t cache_elems = p.num_blocks * bs * s.kv_heads * s.head_size;
  fill(p.dev[PA_IN_KEY_CACHE], cache_elems, cfg.cache_dtype, 1.0f, seed + 4);
  fill(p.dev[PA_IN_VALUE_CACHE], cache_elems, cfg.cache_dtype, 1.0f, seed + 5);
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], p.cu.data(), p.cu.size() * 4,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_PAST_SEQLENS], p.past.data(), p.past.size() * 4,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_BLOCK_TABLE], p.table.data(), p.table.size() * 4,
                        cudaMemcpyHostToDevice));
  p.k_scale = cfg.cache_dtype == PA_DTYPE_INT8 ? 0.01f : 0.004f;
  p.v_scale = p.k_scale;
  if (quantized) {
    CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_K_SCALE], &p.k_scale, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_V_SCALE], &p.v_scale, 4, cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaMalloc(&p.output, desc_bytes(p.out[PA_OUT_OUTPUT])));
  // The fills ran on the legacy default stream and a pageable cudaMemcpy may return before its DMA
  // lands; pa_execute runs on a non-blocking stream, which neither waits for.
  CHECK_CUDA(cudaDeviceSynchronize());
  int64_t tokens = 0;
  for (int L : s.kv_lens) tokens += L;
  p.kv_bytes = 2.0 * (double)tokens * s.kv_heads * s.head_size * pa_dtype_size(cfg.cache_dtype);
}

// Median microseconds of the paged read of every K and V byte of the step.
double paged_read_us(const device_problem &p, cudaStream_t stream) {
  const shape &s = p.cfg.s;
  const int row_vecs = (int)(s.head_size * pa_dtype_size(p.cfg.cache_dtype) / 16);
  const int chunks = (int)((p.max_kv + kCeilingKeys - 1) / kCeilingKeys);
  uint4 *sink;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(uint4)));
  auto launch = [&]() {
    paged_read_kernel<<<(unsigned)((int64_t)p.batch * chunks * s.kv_heads), kCeilingThreads, 0,
                        stream>>>(
        (const uint4 *)p.dev[PA_IN_KEY_CACHE], (const uint4 *)p.dev[PA_IN_VALUE_CACHE],
        (const int32_t *)p.dev[PA_IN_BLOCK_TABLE], (const int32_t *)p.dev[PA_IN_PAST_SEQLENS],
        p.blocks_per_seq, p.cfg.block_size, s.kv_heads, row_vecs, chunks, sink);
  };
  const double us = median_us(stream, 5, 100, 1, launch);
  CHECK_CUDA(cudaFree(sink));
  return us;
}

void release(device_problem &p) {
  for (int i = 0; i < PA_NUM_INPUTS; i++) cudaFree(p.dev[i]);
  cudaFree(p.output);
}

pa_plan *make_plan(const device_problem &p, const int32_t metadata[2]) {
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = p.cfg.s.heads;
  attrs.kv_num_heads = p.cfg.s.kv_heads;
  if (p.cfg.cache_dtype != p.cfg.dtype)
    attrs.k_quant_type = attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = PA_BACKEND_DECODE;
  options.attention_metadata = metadata;
  pa_plan *plan = nullptr;
  pa_status st = pa_plan_create(&plan, &attrs, p.in, p.out, &options);
  if (st != PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    fprintf(stderr, "plan: %s: %s\n", pa_status_string(st), msg);
    return nullptr;
  }
  return plan;
}

// The (sequence b, kv_head) rows of one cache, gathered page by page into [key][channel].
std::vector<unsigned char> download_rows(const device_problem &p, const void *cache, int b,
                                         int kv_head) {
  const shape &s = p.cfg.s;
  const int bs = p.cfg.block_size, L = s.kv_lens[(size_t)b];
  const size_t row_bytes = (size_t)s.head_size * pa_dtype_size(p.cfg.cache_dtype);
  std::vector<unsigned char> rows((size_t)L * row_bytes);
  for (int first = 0; first < L; first += bs) {
    const int32_t block = p.table[(size_t)b * p.blocks_per_seq + first / bs];
    const size_t src = ((size_t)block * bs * s.kv_heads + kv_head) * row_bytes;
    CHECK_CUDA(cudaMemcpy2D(rows.data() + (size_t)first * row_bytes, row_bytes,
                            (const char *)cache + src, row_bytes * s.kv_heads, row_bytes,
                            (size_t)std::min(bs, L - first), cudaMemcpyDeviceToHost));
  }
  return rows;
}

// Host fp64 attention for (token b, head h), from the cache as the step left it (elements read
// through the library's host conversions, lib/host_numeric.h); returns the largest output error
// relative to the largest reference channel. verbose: prints the row's error with the largest
// reference and output channel (zeros, garbage and a partial average look different).
double oracle_max_rel_error(const device_problem &p, int b, int h, bool verbose) {
  const shape &s = p.cfg.s;
  const int D = s.head_size, kv_head = h / (s.heads / s.kv_heads);
  const int L = s.kv_lens[(size_t)b];
  const pa_dtype t = p.cfg.dtype, ct = p.cfg.cache_dtype;
  const size_t tsize = pa_dtype_size(t);
  std::vector<unsigned char> q((size_t)D * tsize), out((size_t)D * tsize);
  CHECK_CUDA(cudaMemcpy(q.data(),
                        (char *)p.dev[PA_IN_QUERY] + ((size_t)b * s.heads + h) * D * tsize,
                        q.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(out.data(), (char *)p.output + ((size_t)b * s.heads + h) * D * tsize,
                        out.size(), cudaMemcpyDeviceToHost));
  const std::vector<unsigned char> keys = download_rows(p, p.dev[PA_IN_KEY_CACHE], b, kv_head);
  const std::vector<unsigned char> values = download_rows(p, p.dev[PA_IN_VALUE_CACHE], b, kv_head);
  const bool quantized = ct != t;
  const double ks = quantized ? p.k_scale : 1.0, vs = quantized ? p.v_scale : 1.0;
  const double scale = 1.0 / sqrt((double)D);
  std::vector<double> scores((size_t)L), acc((size_t)D, 0.0);
  double m = -INFINITY;
  for (int k = 0; k < L; k++) {
    double dot = 0;
    for (int c = 0; c < D; c++)
      dot += pa__load_as_float(t, q.data(), c) *
             pa__load_as_float(ct, keys.data(), (int64_t)k * D + c) * ks;
    scores[(size_t)k] = scale * dot;
    m = std::max(m, scores[(size_t)k]);
  }
  double den = 0;
  for (int k = 0; k < L; k++) {
    double w = exp(scores[(size_t)k] - m);
    den += w;
    for (int c = 0; c < D; c++)
      acc[(size_t)c] += w * pa__load_as_float(ct, values.data(), (int64_t)k * D + c) * vs;
  }
  double max_ref = 1e-6, max_err = 0, max_out = 0;
  for (int c = 0; c < D; c++) {
    const double ref = acc[(size_t)c] / den, got = pa__load_as_float(t, out.data(), c);
    max_ref = std::max(max_ref, fabs(ref));
    const double err = fabs(ref - got);
    if (!(err <= max_err)) max_err = err;  // a NaN output stays NaN (std::max would drop it)
    if (!(fabs(got) <= max_out)) max_out = fabs(got);
  }
  if (verbose)
    printf("  token %d (kv_len %d) head %d: err %.2e (largest |reference| %.2e, |output| %.2e)\n",
           b, L, h, max_err / max_ref, max_ref, max_out);
  return max_err / max_ref;
}

// The largest oracle error over sample rows: the first, a middle and the last token (the long and
// short sequences of a skewed batch), the first and last head. verbose: every row's error.
double sampled_error(const device_problem &p, bool verbose) {
  const int tokens[3] = {0, p.batch / 2, p.batch - 1}, heads[2] = {0, p.cfg.s.heads - 1};
  double worst = 0;
  for (int i = 0; i < 3; i++)
    for (int h : heads) {
      const int b = tokens[i];
      if (i > 0 && b == tokens[i - 1]) continue;  // batches of one or two
      const double err = oracle_max_rel_error(p, b, h, verbose);
      if (!(err <= worst)) worst = err;
    }
  return worst;
}

// Median microseconds of one pa_execute (eager), or of one graph replay.
double time_execute(const pa_plan *plan, const device_problem &p, void *workspace, size_t ws,
                    cudaStream_t stream, int reps, bool graph) {
  void *outputs[PA_NUM_OUTPUTS] = {p.output, nullptr, nullptr, nullptr};
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    pa_execute(plan, p.dev, outputs, workspace, ws, stream);
    CHECK_CUDA(cudaStreamEndCapture(stream, &g));
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  auto step = [&]() {
    if (graph)
      CHECK_CUDA(cudaGraphLaunch(exec, stream));
    else
      pa_execute(plan, p.dev, outputs, workspace, ws, stream);
  };
  // graph: back-to-back replays, the per-step time a serving loop sees
  const double us = graph ? median_us(stream, 10, 5, std::max(reps, 200), step)
                          : median_us(stream, 10, reps, 1, step);
  if (exec) CHECK_CUDA(cudaGraphExecDestroy(exec));
  return us;
}

// Plans, checks against the oracle, times; returns 0 when the check passed.
int bench_one(const config &cfg, double copy, cudaStream_t stream, uint64_t seed) {
  device_problem p;
  setup(p, cfg, seed);
  const int32_t metadata[2] = {1, (int32_t)p.max_kv};
  pa_plan *plan = make_plan(p, metadata);
  if (!plan) {
    release(p);
    return 1;
  }
  size_t ws = pa_plan_workspace_size(plan);
  void *workspace = nullptr;
  if (ws) CHECK_CUDA(cudaMalloc(&workspace, ws));
  void *outputs[PA_NUM_OUTPUTS] = {p.output, nullptr, nullptr, nullptr};
  pa_status st = pa_execute(plan, p.dev, outputs, workspace, ws, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const double tolerance =
      cfg.dtype == PA_DTYPE_FLOAT16 && cfg.cache_dtype == cfg.dtype ? 5e-3 : 2e-2;
  const double err = st == PA_SUCCESS ? sampled_error(p, false) : 0;
  const bool ok = st == PA_SUCCESS && err <= tolerance;
  if (!ok && st == PA_SUCCESS) {
    // Which rows failed, and whether a second step on the same inputs fails too (a deterministic
    // error) or not (a race). The configuration counts as failed either way.
    printf("%s block %d: check failed, per sample row:\n", cfg.s.label, cfg.block_size);
    sampled_error(p, true);
    CHECK_CUDA(cudaDeviceSynchronize());
    const pa_status again = pa_execute(plan, p.dev, outputs, workspace, ws, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    printf("  a second step on the same inputs: status %s, err %.2e\n", pa_status_string(again),
           again == PA_SUCCESS ? sampled_error(p, false) : 0.0);
  }

  const double us = time_execute(plan, p, workspace, ws, stream, 100, false);
  const double graph_us = time_execute(plan, p, workspace, ws, stream, 200, true);
  const double tbps = p.kv_bytes / (us * 1e-6) / 1e12;
  const double graph_tbps = p.kv_bytes / (graph_us * 1e-6) / 1e12;
  const double ceiling = p.kv_bytes / (paged_read_us(p, stream) * 1e-6) / 1e12;
  printf("%-28s block %3d %-4s cache %-4s: %9.1f us %6.2f TB/s %5.1f%% of copy | graph %9.2f us "
         "%5.1f%% of copy | %5.1f%% of the paged read (%.2f TB/s)  err %.1e %s\n",
         cfg.s.label, cfg.block_size, dtype_name(cfg.dtype), dtype_name(cfg.cache_dtype), us, tbps,
         100.0 * tbps / copy, graph_us, 100.0 * graph_tbps / copy, 100.0 * tbps / ceiling, ceiling,
         err, ok ? "ok" : "FAILED CHECK");
  fflush(stdout);
  cudaFree(workspace);
  pa_plan_destroy(plan);
  release(p);
  return ok ? 0 : 1;
}

shape uniform(const char *label, int heads, int kv_heads, int head_size, int batch, int len) {
  return shape{label, heads, kv_heads, head_size, std::vector<int>((size_t)batch, len)};
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // rows already printed survive a timeout or a crash
  bool quick = false, graph_only = false;
  const char *only = nullptr;
  int only_block = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = true;
    else if (!strcmp(argv[i], "--graph"))
      graph_only = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--block") && i + 1 < argc)
      only_block = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--graph] [--only TEXT] [--block N]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy = copy_tbps(stream);
  printf("device %s, %d SMs; device-to-device copy %.2f TB/s (read + write)\n", prop.name,
         prop.multiProcessorCount, copy);

  std::vector<shape> shapes = {
      uniform("32/8 d128 64x4k", 32, 8, 128, 64, 4096),
      uniform("32/8 d128 256x4k", 32, 8, 128, 256, 4096),
      uniform("32/8 d128 1x128k", 32, 8, 128, 1, 131072),
      uniform("32/8 d128 32x32k", 32, 8, 128, 32, 32768),
      uniform("64/8 d128 64x4k", 64, 8, 128, 64, 4096),
      uniform("128/8 d128 64x4k", 128, 8, 128, 64, 4096),
      uniform("32/4 d128 64x4k", 32, 4, 128, 64, 4096),
      uniform("64/8 d64 64x8k", 64, 8, 64, 64, 8192),
  };
  shape skew = uniform("32/8 d128 1x128k+63x2k", 32, 8, 128, 64, 2048);
  skew.kv_lens[0] = 131072;
  shapes.push_back(skew);
  // a serving engine's table sized for the longest context it allows: the split size follows the
  // table's capacity (it may not depend on the bounds), so a short sequence gets few splits
  shape wide = uniform("32/8 d128 1x8k in a 128k table", 32, 8, 128, 1, 8192);
  wide.table_keys = 131072;
  shapes.push_back(wide);

  int failures = 0;
  uint64_t seed = 1234;
  const shape latency = uniform("32/8 d128 1x1k (latency)", 32, 8, 128, 1, 1024);
  if (!graph_only) {
    const std::vector<int> block_sizes =
        quick ? std::vector<int>{16, 64} : std::vector<int>{16, 32, 64};
    auto wanted = [&](const shape &s, int bs) {
      return (!only || strstr(s.label, only)) && (!only_block || bs == only_block);
    };
    for (const shape &s : shapes)
      for (int bs : block_sizes)
        if (wanted(s, bs))
          failures +=
              bench_one({s, bs, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16}, copy, stream, seed++);
    // cache types on the first rows: fp16, int8, fp8 (target: 8-bit >= 1.8x the bf16 speed)
    const size_t typed_rows = quick ? 1 : 4;
    for (size_t i = 0; i < typed_rows; i++)
      for (pa_dtype cache : {PA_DTYPE_FLOAT16, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN}) {
        pa_dtype t = cache == PA_DTYPE_FLOAT16 ? PA_DTYPE_FLOAT16 : PA_DTYPE_BFLOAT16;
        if (wanted(shapes[i], 16))
          failures += bench_one({shapes[i], 16, t, cache}, copy, stream, seed++);
      }
  }
  if (!only || graph_only) {
    failures +=
        bench_one({latency, 16, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16}, copy, stream, seed++);
    printf("graph floor of the latency row (empty kernels, replayed back to back as the rows): one "
           "kernel %.2f us, two chained %.2f us\n",
           graph_floor_us(stream, 1), graph_floor_us(stream, 2));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (failures) printf("%d configuration(s) FAILED the correctness check\n", failures);
  return failures ? 1 : 0;
}
