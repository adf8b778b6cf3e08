// pa_bench_prefill: the prefill rows of issue 16 (shared/design/performance.md) on PA_BACKEND_PREFILL,
// AUTO and UNFUSED.
//
// Rows, bf16, 32/8 heads, head 128, block 16 unless stated: causal prefill 4 x 2k and 1 x 8k; a 2k
// chunk over 30k cached; a mixed step (one 2k chunk from scratch + 63 decodes at 4k) with its parts
// alone (the chunk on PREFILL and AUTO, the decodes on AUTO, i.e. DECODE) and the ratio step / (sum
// of the parts); a speculative-verify step (64 sequences x 4 tokens over 4k) with the 1-token step of
// the same batch on DECODE and the bandwidth of both; 1 x 8k with int8 and fp8 caches (per tensor);
// 1 x 8k at block 64 and 256; 4 x 2k with its K / V already cached (slot_mapping all -1, no write:
// the attention's own time).
//
// For each (row, backend): random data filled on the device (never zeros), a shuffled block table,
// attention_metadata passed with the tight bounds; one pa_execute first, checked against a host fp64
// oracle on sample rows (first, middle and last token of the first, a middle and the last sequence;
// first and last head), then timed with CUDA events: eager (median of 100 after warm-up) and as
// CUDA-graph replays (median of 100 samples). A backend whose plan is refused is reported and
// skipped, as is any whose workspace would exceed 10 GiB; a step over 20 ms (UNFUSED) is timed by 11
// graph replays only. AUTO reuses the measurement of the backend it picked.
//
// TFLOP/s count 4 * heads * head_size * sum over sequences of new * (cached + new / 2) (performance.md:
// causal); % of peak is against a dense 8192^3 bf16 GEMM (cuBLASLt, random data, median of 100)
// measured in the same run. TB/s count the K + V bytes of the step once. Times in the table and the
// CSV are the graph-replay medians.
//   pa_bench_prefill [--quick] [--no-unfused] [--only TEXT] [--csv FILE]
//     --quick      the 4 x 2k, mixed and verify rows only, no UNFUSED (what tools/gpu-check.sh runs)
//     --no-unfused every row, but not on UNFUSED (minutes less)
//     --only TEXT  only the rows whose label contains TEXT (e.g. for a profiler)
//     --csv FILE   also write label,backend,us,tflops,tbps,pct to FILE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "bench_common.cuh"
#include "bench_peaks.cuh"
#include "pagedattn/pagedattn.h"

namespace {

using bench::desc;
using bench::desc_bytes;
using bench::dtype_name;
using bench::fill;
using bench::gemm_peak_tflops;
using bench::median_us;

constexpr size_t kMaxWorkspace = (size_t)10 << 30;  // UNFUSED above this is skipped
constexpr double kSlowStepUs = 20000.0;               // above this: graph replays only

// ---- host decoding for the oracle -------------------------------------------------------------

float half_bits_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  float v = exp == 0    ? ldexpf((float)mant, -24)
            : exp == 31 ? INFINITY
                        : ldexpf((float)(mant | 1024), exp - 25);
  return sign ? -v : v;
}
float bf16_bits_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
float fp8_bits_to_float(uint8_t b) {
  int sign = b >> 7, exp = (b >> 3) & 15, mant = b & 7;
  float v = exp == 0 ? ldexpf((float)mant, -9) : ldexpf((float)(mant | 8), exp - 10);
  return sign ? -v : v;
}
float element_to_float(const void *base, int64_t i, pa_dtype t) {
  switch (t) {
    case PA_DTYPE_FLOAT16:
      return half_bits_to_float(static_cast<const uint16_t *>(base)[i]);
    case PA_DTYPE_BFLOAT16:
      return bf16_bits_to_float(static_cast<const uint16_t *>(base)[i]);
    case PA_DTYPE_INT8:
      return (float)static_cast<const int8_t *>(base)[i];
    default:
      return fp8_bits_to_float(static_cast<const uint8_t *>(base)[i]);
  }
}

// ---- one step ------------------------------------------------------------------------------------

struct seq_shape {
  int q, past;  // new tokens, cached tokens
};

struct step_shape {
  std::string label;
  std::vector<seq_shape> seqs;
  int block_size = 16;
  pa_dtype cache_dtype = PA_DTYPE_BFLOAT16;
  int heads = 32, kv_heads = 8, head_size = 128;
  pa_dtype dtype = PA_DTYPE_BFLOAT16;
  // the new tokens' K / V already in the cache (slot_mapping all -1, as after a prefix-cache hit):
  // the step writes nothing, so its time is the attention's alone
  bool keys_cached = false;
};

step_shape uniform(const std::string &label, int batch, int q, int past) {
  step_shape s;
  s.label = label;
  s.seqs.assign((size_t)batch, seq_shape{q, past});
  return s;
}

struct sample {
  int b, j, h;              // sequence, its j-th new token, query head
  std::vector<double> ref;  // the oracle's output row (head_size)
};

struct device_problem {
  step_shape s;
  int batch = 0, blocks_per_seq = 0;
  int64_t tokens = 0, num_blocks = 0;
  int32_t max_q = 0, max_kv = 0;
  std::vector<int32_t> cu, past, table;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  void *dev[PA_NUM_INPUTS];
  void *output = nullptr;
  float k_scale = 1, v_scale = 1;
  double flops = 0, kv_bytes = 0;
  std::vector<sample> samples;
  bool oracle_ready = false;
};

bool quantized(const device_problem &p) { return p.s.cache_dtype != p.s.dtype; }

void setup(device_problem &p, const step_shape &s, uint64_t seed) {
  p.s = s;
  const int bs = s.block_size, B = (int)s.seqs.size();
  p.batch = B;
  for (const seq_shape &q : s.seqs) {
    const int kv = q.past + q.q;
    p.tokens += q.q;
    p.max_q = std::max(p.max_q, q.q);
    p.max_kv = std::max(p.max_kv, kv);
    p.num_blocks += (kv + bs - 1) / bs;
    p.blocks_per_seq = std::max(p.blocks_per_seq, (kv + bs - 1) / bs);
    p.flops += 4.0 * s.heads * s.head_size * q.q * (q.past + q.q / 2.0);
    p.kv_bytes += 2.0 * kv * s.kv_heads * s.head_size * pa_dtype_size(s.cache_dtype);
  }
  // block ids: a random permutation of the pool, as a serving engine's allocator leaves it
  std::vector<int32_t> ids((size_t)p.num_blocks);
  for (int64_t i = 0; i < p.num_blocks; i++) ids[(size_t)i] = (int32_t)i;
  srand((unsigned)seed);
  for (int64_t i = p.num_blocks - 1; i > 0; i--)
    std::swap(ids[(size_t)i], ids[(size_t)(((int64_t)rand() * 65536 + rand()) % (i + 1))]);
  p.table.assign((size_t)B * p.blocks_per_seq, -1);
  p.cu.assign((size_t)B + 1, 0);
  p.past.resize((size_t)B);
  int64_t next = 0;
  for (int b = 0; b < B; b++) {
    const seq_shape &q = s.seqs[(size_t)b];
    p.cu[(size_t)b + 1] = p.cu[(size_t)b] + q.q;
    p.past[(size_t)b] = q.past;
    for (int j = 0; j < (q.past + q.q + bs - 1) / bs; j++)
      p.table[(size_t)b * p.blocks_per_seq + j] = ids[(size_t)next++];
  }

  const int64_t T = p.tokens, H = s.heads, Hk = s.kv_heads, D = s.head_size;
  memset(p.in, 0, sizeof p.in);
  memset(p.out, 0, sizeof p.out);
  p.in[PA_IN_QUERY] = desc(s.dtype, 2, T, H * D);
  p.in[PA_IN_KEY] = p.in[PA_IN_VALUE] = desc(s.dtype, 2, T, Hk * D);
  p.in[PA_IN_KEY_CACHE] = p.in[PA_IN_VALUE_CACHE] = desc(s.cache_dtype, 4, p.num_blocks, bs, Hk, D);
  p.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, B + 1);
  p.in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, B);
  p.in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, B, p.blocks_per_seq);
  if (quantized(p)) p.in[PA_IN_K_SCALE] = p.in[PA_IN_V_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1);
  p.in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2);
  if (s.keys_cached) p.in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, T);
  p.out[PA_OUT_OUTPUT] = p.in[PA_IN_QUERY];

  memset(p.dev, 0, sizeof p.dev);
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (i == PA_IN_ATTENTION_METADATA || !desc_bytes(p.in[i])) continue;
    CHECK_CUDA(cudaMalloc(&p.dev[i], desc_bytes(p.in[i])));
  }
  fill(p.dev[PA_IN_QUERY], T * H * D, s.dtype, 2.0f, seed + 1);
  fill(p.dev[PA_IN_KEY], T * Hk * D, s.dtype, 1.0f, seed + 2);
  fill(p.dev[PA_IN_VALUE], T * Hk * D, s.dtype, 1.0f, seed + 3);
  const int64_t cache_elems = p.num_blocks * bs * Hk * D;
  fill(p.dev[PA_IN_KEY_CACHE], cache_elems, s.cache_dtype, 1.0f, seed + 4);
  fill(p.dev[PA_IN_VALUE_CACHE], cache_elems, s.cache_dtype, 1.0f, seed + 5);
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], p.cu.data(), p.cu.size() * 4,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_PAST_SEQLENS], p.past.data(), p.past.size() * 4,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_BLOCK_TABLE], p.table.data(), p.table.size() * 4,
                        cudaMemcpyHostToDevice));
  if (s.keys_cached)  // every slot -1: 0xff bytes
    CHECK_CUDA(cudaMemset(p.dev[PA_IN_SLOT_MAPPING], 0xff, desc_bytes(p.in[PA_IN_SLOT_MAPPING])));
  p.k_scale = s.cache_dtype == PA_DTYPE_INT8 ? 0.01f : 0.004f;
  p.v_scale = p.k_scale;
  if (quantized(p)) {
    CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_K_SCALE], &p.k_scale, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(p.dev[PA_IN_V_SCALE], &p.v_scale, 4, cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaMalloc(&p.output, desc_bytes(p.out[PA_OUT_OUTPUT])));
  // The fills ran on the legacy default stream and a pageable cudaMemcpy may return before its DMA
  // lands; pa_execute runs on a non-blocking stream, which neither waits for.
  CHECK_CUDA(cudaDeviceSynchronize());

  // sample rows: first, middle, last token of the first, a middle and the last sequence (those
  // with tokens); first and last head
  const int seqs[3] = {0, B / 2, B - 1};
  for (int i = 0; i < 3; i++) {
    const int b = seqs[i];
    if ((i > 0 && b == seqs[i - 1]) || s.seqs[(size_t)b].q == 0) continue;
    const int q = s.seqs[(size_t)b].q;
    const int tokens[3] = {0, q / 2, q - 1};
    for (int k = 0; k < 3; k++) {
      if (k > 0 && tokens[k] == tokens[k - 1]) continue;
      for (int h : {0, s.heads - 1}) p.samples.push_back(sample{b, tokens[k], h, {}});
    }
  }
}

void release(device_problem &p) {
  for (int i = 0; i < PA_NUM_INPUTS; i++) cudaFree(p.dev[i]);
  cudaFree(p.output);
}

// The (sequence b, kv_head) rows of one cache, gathered page by page into [key][channel].
std::vector<unsigned char> download_rows(const device_problem &p, const void *cache, int b,
                                         int kv_head) {
  const step_shape &s = p.s;
  const int bs = s.block_size, L = s.seqs[(size_t)b].past + s.seqs[(size_t)b].q;
  const size_t row_bytes = (size_t)s.head_size * pa_dtype_size(s.cache_dtype);
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

// Host fp64 causal attention (bottom-right: token j of sequence b sees keys [0, past + j]) of every
// sample row, from the cache as the step left it (the new tokens' K / V written by pa_execute).
void compute_oracle(device_problem &p) {
  const step_shape &s = p.s;
  const int D = s.head_size, group = s.heads / s.kv_heads;
  const pa_dtype t = s.dtype, ct = s.cache_dtype;
  const size_t tsize = pa_dtype_size(t);
  const double ks = quantized(p) ? p.k_scale : 1.0, vs = quantized(p) ? p.v_scale : 1.0;
  const double scale = 1.0 / sqrt((double)D);
  std::map<std::pair<int, int>, std::pair<std::vector<unsigned char>, std::vector<unsigned char>>>
      rows;
  for (sample &x : p.samples) {
    const int kv_head = x.h / group;
    auto key = std::make_pair(x.b, kv_head);
    if (!rows.count(key))
      rows[key] = std::make_pair(download_rows(p, p.dev[PA_IN_KEY_CACHE], x.b, kv_head),
                                 download_rows(p, p.dev[PA_IN_VALUE_CACHE], x.b, kv_head));
    const std::vector<unsigned char> &keys = rows[key].first, &values = rows[key].second;
    const int64_t token = p.cu[(size_t)x.b] + x.j;
    std::vector<unsigned char> q((size_t)D * tsize);
    CHECK_CUDA(cudaMemcpy(q.data(),
                          (char *)p.dev[PA_IN_QUERY] + ((size_t)token * s.heads + x.h) * D * tsize,
                          q.size(), cudaMemcpyDeviceToHost));
    const int L = p.past[(size_t)x.b] + x.j + 1;
    std::vector<double> scores((size_t)L);
    double m = -INFINITY;
    for (int k = 0; k < L; k++) {
      double dot = 0;
      for (int c = 0; c < D; c++)
        dot += (double)element_to_float(q.data(), c, t) *
               element_to_float(keys.data(), (int64_t)k * D + c, ct) * ks;
      scores[(size_t)k] = scale * dot;
      m = std::max(m, scores[(size_t)k]);
    }
    double den = 0;
    x.ref.assign((size_t)D, 0.0);
    for (int k = 0; k < L; k++) {
      const double w = exp(scores[(size_t)k] - m);
      den += w;
      for (int c = 0; c < D; c++)
        x.ref[(size_t)c] += w * element_to_float(values.data(), (int64_t)k * D + c, ct) * vs;
    }
    for (double &v : x.ref) v /= den;
  }
  p.oracle_ready = true;
}

// The largest error of the output over the sample rows, relative to each row's largest reference
// channel (NaN stays NaN). verbose: every row's error.
double sampled_error(device_problem &p, bool verbose) {
  if (!p.oracle_ready) compute_oracle(p);
  const step_shape &s = p.s;
  const int D = s.head_size;
  const size_t tsize = pa_dtype_size(s.dtype);
  double worst = 0;
  std::vector<unsigned char> out((size_t)D * tsize);
  for (const sample &x : p.samples) {
    const int64_t token = p.cu[(size_t)x.b] + x.j;
    CHECK_CUDA(cudaMemcpy(out.data(),
                          (char *)p.output + ((size_t)token * s.heads + x.h) * D * tsize,
                          out.size(), cudaMemcpyDeviceToHost));
    double max_ref = 1e-6, max_err = 0, max_out = 0;
    for (int c = 0; c < D; c++) {
      const double ref = x.ref[(size_t)c], got = element_to_float(out.data(), c, s.dtype);
      max_ref = std::max(max_ref, fabs(ref));
      const double err = fabs(ref - got);
      if (!(err <= max_err)) max_err = err;
      if (!(fabs(got) <= max_out)) max_out = fabs(got);
    }
    const double rel = max_err / max_ref;
    if (verbose)
      printf("    sequence %d token %d (of %d, past %d) head %d: err %.2e (largest |reference| "
             "%.2e, |output| %.2e)\n",
             x.b, x.j, s.seqs[(size_t)x.b].q, s.seqs[(size_t)x.b].past, x.h, rel, max_ref, max_out);
    if (!(rel <= worst)) worst = rel;
  }
  return worst;
}

// ---- measurements ------------------------------------------------------------------------------

struct measurement {
  std::string label;    // the step
  pa_backend requested = PA_BACKEND_AUTO;
  pa_backend ran_on = PA_BACKEND_AUTO;  // AUTO's choice; the forced backend otherwise
  bool timed = false, check_ok = false;
  double eager_us = -1, graph_us = -1, err = 0;
  double flops = 0, kv_bytes = 0;
  std::string note;
  std::string backend_text() const {
    std::string t = pa_backend_name(requested);
    if (requested == PA_BACKEND_AUTO && ran_on != PA_BACKEND_AUTO)
      t += std::string("->") + pa_backend_name(ran_on);
    return t;
  }
  double tflops() const { return timed ? flops / (graph_us * 1e-6) / 1e12 : NAN; }
  double tbps() const { return timed ? kv_bytes / (graph_us * 1e-6) / 1e12 : NAN; }
};

pa_plan *make_plan(const device_problem &p, pa_backend backend, const int32_t metadata[2],
                   std::string *why) {
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = p.s.heads;
  attrs.kv_num_heads = p.s.kv_heads;
  if (quantized(p)) attrs.k_quant_type = attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = backend;
  options.attention_metadata = metadata;
  pa_plan *plan = nullptr;
  pa_status st = pa_plan_create(&plan, &attrs, p.in, p.out, &options);
  if (st != PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    *why = std::string(pa_status_string(st)) + ": " + msg;
    return nullptr;
  }
  return plan;
}

// Checks one pa_execute of the plan against the oracle, then times it eagerly and as graph replays.
measurement measure(device_problem &p, pa_plan *plan, pa_backend requested, cudaStream_t stream,
                    int *failures) {
  measurement m;
  m.label = p.s.label;
  m.requested = requested;
  m.ran_on = pa_plan_backend(plan);
  m.flops = p.flops;
  m.kv_bytes = p.kv_bytes;
  const size_t ws = pa_plan_workspace_size(plan);
  if (ws > kMaxWorkspace) {
    char note[160];
    snprintf(note, sizeof note, "skipped: workspace %.1f GiB > %.0f GiB", ws / 1073741824.0,
             kMaxWorkspace / 1073741824.0);
    m.note = note;
    return m;
  }
  void *workspace = nullptr;
  if (ws && cudaMalloc(&workspace, ws) != cudaSuccess) {
    cudaGetLastError();
    char note[160];
    snprintf(note, sizeof note, "skipped: workspace of %.1f GiB could not be allocated",
             ws / 1073741824.0);
    m.note = note;
    return m;
  }
  void *outputs[PA_NUM_OUTPUTS] = {p.output, nullptr, nullptr, nullptr};
  auto step = [&]() { return pa_execute(plan, p.dev, outputs, workspace, ws, stream); };

  // the check: poisoned output (0xffff is a NaN in bf16 and fp16), one step, timed roughly
  CHECK_CUDA(cudaMemsetAsync(p.output, 0xff, desc_bytes(p.out[PA_OUT_OUTPUT]), stream));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start, stream));
  const pa_status st = step();
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  float first_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&first_ms, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  if (st != PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    m.note = std::string("pa_execute failed: ") + pa_status_string(st) + ": " + msg;
    (*failures)++;
    cudaFree(workspace);
    return m;
  }
  const double tolerance = quantized(p) || p.s.dtype == PA_DTYPE_BFLOAT16 ? 2e-2 : 5e-3;
  m.err = sampled_error(p, false);
  m.check_ok = m.err <= tolerance;
  if (!m.check_ok) {
    // Which rows failed, and whether a second step on the same inputs fails too (a deterministic
    // error) or not (a race). The measurement counts as failed either way.
    printf("  %s on %s: check FAILED (err %.2e > %.0e), per sample row:\n", p.s.label.c_str(),
           pa_backend_name(m.ran_on), m.err, tolerance);
    sampled_error(p, true);
    const pa_status again = step();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    printf("    a second step on the same inputs: status %s, err %.2e\n", pa_status_string(again),
           again == PA_SUCCESS ? sampled_error(p, false) : 0.0);
    (*failures)++;
  }

  const bool slow = first_ms * 1000.0 > kSlowStepUs;
  if (!slow) m.eager_us = median_us(stream, 10, 100, 1, step);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const pa_status captured = step();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  if (captured != PA_SUCCESS) {
    m.note = std::string("capture failed: ") + pa_status_string(captured);
    (*failures)++;
  } else {
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    // back-to-back replays of short steps (at least ~200 us per event pair), one per pair otherwise
    const double estimate_us = m.eager_us > 0 ? m.eager_us : first_ms * 1000.0;
    const int per_sample = std::max(1, std::min(50, (int)ceil(200.0 / std::max(estimate_us, 1.0))));
    m.graph_us = median_us(stream, slow ? 2 : 10, slow ? 11 : 100, per_sample,
                           [&]() { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    m.timed = true;
    if (slow) m.note = "eager not timed, median of 11 replays (one step > 20 ms)";
  }
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaFree(workspace));
  return m;
}

double gemm_peak = 0;  // TFLOP/s, measured at start
std::vector<measurement> results;

void print_measurement(const measurement &m) {
  if (!m.timed) {
    printf("  %-14s %s\n", m.backend_text().c_str(), m.note.c_str());
  } else {
    char eager[32];
    if (m.eager_us > 0)
      snprintf(eager, sizeof eager, "%10.1f us", m.eager_us);
    else
      snprintf(eager, sizeof eager, "%13s", "-");
    printf("  %-14s eager %s | graph %10.1f us %7.1f TFLOP/s %5.1f%% of GEMM %5.2f TB/s | err "
           "%.1e %s%s%s\n",
           m.backend_text().c_str(), eager, m.graph_us, m.tflops(),
           100.0 * m.tflops() / gemm_peak, m.tbps(), m.err, m.check_ok ? "ok" : "FAILED CHECK",
           m.note.empty() ? "" : "; ", m.note.c_str());
  }
  fflush(stdout);
}

// Sets up the step and measures it on each backend in `backends`; a plan that runs on a backend
// measured before (AUTO's choice, or a forced backend AUTO picked) reuses that measurement. Returns
// them in the order of `backends`.
std::vector<measurement> bench_step(const step_shape &s, const std::vector<pa_backend> &backends,
                                    bool unfused_allowed, cudaStream_t stream, uint64_t seed,
                                    int *failures) {
  device_problem p;
  setup(p, s, seed);
  const int32_t metadata[2] = {p.max_q, p.max_kv};
  printf("%s: %d sequences, %lld tokens, max KV %d, block %d, cache %s, %.3g GFLOP, %.3g GB of "
         "K+V\n",
         s.label.c_str(), p.batch, (long long)p.tokens, p.max_kv, s.block_size,
         dtype_name(s.cache_dtype), p.flops / 1e9, p.kv_bytes / 1e9);
  std::vector<measurement> out;
  for (pa_backend b : backends) {
    measurement m;
    m.label = s.label;
    m.requested = b;
    m.flops = p.flops;
    m.kv_bytes = p.kv_bytes;
    if (b == PA_BACKEND_UNFUSED && !unfused_allowed) {
      m.note = "skipped (--quick or --no-unfused)";
    } else {
      std::string why;
      pa_plan *plan = make_plan(p, b, metadata, &why);
      if (!plan) {
        m.note = "no plan: " + why;
      } else {
        const pa_backend on = pa_plan_backend(plan);
        const measurement *earlier = nullptr;  // of the same backend, AUTO's choice or forced
        for (const measurement &e : out)
          if (e.ran_on == on) earlier = &e;
        if (earlier) {
          m = *earlier;
          m.requested = b;
          m.ran_on = on;
          m.note = std::string("the ") + pa_backend_name(on) + " measurement above";
        } else {
          m = measure(p, plan, b, stream, failures);
        }
        pa_plan_destroy(plan);
      }
    }
    print_measurement(m);
    out.push_back(m);
    results.push_back(m);
  }
  release(p);
  return out;
}

const measurement *find_timed(const std::vector<measurement> &ms, pa_backend requested) {
  for (const measurement &m : ms)
    if (m.requested == requested && m.timed) return &m;
  return nullptr;
}

std::vector<std::string> summary;  // ratio lines, printed after the table

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // rows already printed survive a timeout or a crash
  bool quick = false, no_unfused = false;
  const char *only = nullptr, *csv = nullptr;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = true;
    else if (!strcmp(argv[i], "--no-unfused"))
      no_unfused = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
      csv = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--no-unfused] [--only TEXT] [--csv FILE]\n", argv[0]);
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
  gemm_peak = gemm_peak_tflops(stream, 8192);
  printf("device %s, %d SMs; dense bf16 GEMM 8192^3 (cuBLASLt) %.1f TFLOP/s\n", prop.name,
         prop.multiProcessorCount, gemm_peak);
  printf("bf16, 32/8 heads, head 128, block 16 unless stated; tight attention_metadata; times are "
         "medians of 100; %% of GEMM is against the GEMM above\n");
  const char *family = getenv("PA_PREFILL_KERNEL");
  printf("PREFILL kernels: %s\n", family && !strcmp(family, "mma.sync")
                                       ? "mma.sync (PA_PREFILL_KERNEL)"
                                       : "the plan's choice (wgmma on compute capability 9.0 "
                                         "above 64 channels, else mma.sync)");

  const std::vector<pa_backend> all_three = {PA_BACKEND_PREFILL, PA_BACKEND_AUTO,
                                             PA_BACKEND_UNFUSED};
  const bool unfused = !quick && !no_unfused;
  auto wanted = [&](const std::string &label) {
    return !only || label.find(only) != std::string::npos;
  };
  int failures = 0;
  uint64_t seed = 4321;

  std::vector<step_shape> plain;
  plain.push_back(uniform("causal 4x2k", 4, 2048, 0));
  if (!quick) {
    // 4 x 2k without its write (the attention's own pace; a label --only "causal 4x2k" keeps)
    step_shape cached = uniform("causal 4x2k keys cached", 4, 2048, 0);
    cached.keys_cached = true;
    plain.push_back(cached);
    plain.push_back(uniform("causal 1x8k", 1, 8192, 0));
    plain.push_back(uniform("chunk 2k over 30k", 1, 2048, 30720));
    // causal 1 x 8k with one change
    auto variant = [&](const char *label, auto &&change) {
      step_shape s = uniform(label, 1, 8192, 0);
      change(s);
      plain.push_back(s);
    };
    variant("causal 1x8k int8", [](step_shape &s) { s.cache_dtype = PA_DTYPE_INT8; });
    variant("causal 1x8k fp8", [](step_shape &s) { s.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN; });
    variant("causal 1x8k block 64", [](step_shape &s) { s.block_size = 64; });
    variant("causal 1x8k block 256", [](step_shape &s) { s.block_size = 256; });
    // the other head sizes of issue 18's Hopper shapes (labels that --only "causal 1x8k" misses)
    variant("causal 8k d256", [](step_shape &s) { s.head_size = 256; });
    variant("causal 8k d64", [](step_shape &s) { s.head_size = 64; });
    variant("causal 8k d64 int8", [](step_shape &s) {
      s.head_size = 64;
      s.cache_dtype = PA_DTYPE_INT8;
    });
  }
  for (const step_shape &s : plain)
    if (wanted(s.label)) bench_step(s, all_three, unfused, stream, seed++, &failures);

  // the mixed step and its parts
  const std::string mixed_label = "mixed 2k + 63x4k";
  if (wanted(mixed_label)) {
    step_shape mixed;
    mixed.label = mixed_label;
    mixed.seqs.push_back(seq_shape{2048, 0});
    for (int b = 0; b < 63; b++) mixed.seqs.push_back(seq_shape{1, 4095});
    const std::vector<measurement> step =
        bench_step(mixed, all_three, unfused, stream, seed++, &failures);
    const std::vector<measurement> chunk =
        bench_step(uniform(mixed_label + " part: chunk 2k", 1, 2048, 0),
                   {PA_BACKEND_PREFILL, PA_BACKEND_AUTO}, unfused, stream, seed++, &failures);
    const std::vector<measurement> decodes =
        bench_step(uniform(mixed_label + " part: 63 decodes at 4k", 63, 1, 4095),
                   {PA_BACKEND_AUTO}, unfused, stream, seed++, &failures);
    const measurement *dec = find_timed(decodes, PA_BACKEND_AUTO);
    for (pa_backend b : {PA_BACKEND_PREFILL, PA_BACKEND_AUTO}) {
      const measurement *whole = find_timed(step, b), *part = find_timed(chunk, b);
      char line[256];
      if (whole && part && dec)
        snprintf(line, sizeof line,
                 "mixed step on %s: %.1f us / (chunk on %s %.1f us + decodes on %s %.1f us) = "
                 "%.2fx (target <= 1.15x)",
                 whole->backend_text().c_str(), whole->graph_us, part->backend_text().c_str(),
                 part->graph_us, dec->backend_text().c_str(), dec->graph_us,
                 whole->graph_us / (part->graph_us + dec->graph_us));
      else
        snprintf(line, sizeof line, "mixed step on %s: ratio n/a (not every part was timed)",
                 pa_backend_name(b));
      summary.push_back(line);
    }
  }

  // the speculative-verify step and the 1-token step of the same batch (same KV length)
  const std::string verify_label = "verify 64x4 over 4k";
  if (wanted(verify_label)) {
    const std::vector<measurement> verify = bench_step(uniform(verify_label, 64, 4, 4096),
                                                       all_three, unfused, stream, seed++,
                                                       &failures);
    const std::vector<measurement> decode =
        bench_step(uniform(verify_label + " part: 1-token step 64x4k", 64, 1, 4099),
                   {PA_BACKEND_DECODE}, unfused, stream, seed++, &failures);
    const measurement *dec = find_timed(decode, PA_BACKEND_DECODE);
    for (pa_backend b : {PA_BACKEND_PREFILL, PA_BACKEND_AUTO}) {
      const measurement *v = find_timed(verify, b);
      char line[256];
      if (v && dec)
        snprintf(line, sizeof line,
                 "verify step on %s: %.2f TB/s = %.0f%% of the 1-token step's %.2f TB/s on DECODE "
                 "(target >= 80%%)",
                 v->backend_text().c_str(), v->tbps(), 100.0 * v->tbps() / dec->tbps(),
                 dec->tbps());
      else
        snprintf(line, sizeof line, "verify step on %s: ratio n/a (not timed)",
                 pa_backend_name(b));
      summary.push_back(line);
    }
  }
  CHECK_CUDA(cudaStreamDestroy(stream));

  // the table
  printf("\n%-44s %-16s %12s %9s %8s %7s  %s\n", "step", "backend", "graph us", "TFLOP/s",
         "% GEMM", "TB/s", "check / note");
  for (const measurement &m : results) {
    if (m.timed)
      printf("%-44s %-16s %12.1f %9.1f %7.1f%% %7.2f  %s%s%s\n", m.label.c_str(),
             m.backend_text().c_str(), m.graph_us, m.tflops(), 100.0 * m.tflops() / gemm_peak,
             m.tbps(), m.check_ok ? "ok" : "FAILED CHECK", m.note.empty() ? "" : "; ",
             m.note.c_str());
    else
      printf("%-44s %-16s %12s %9s %8s %7s  %s\n", m.label.c_str(), m.backend_text().c_str(), "-",
             "-", "-", "-", m.note.c_str());
  }
  for (const std::string &line : summary) printf("%s\n", line.c_str());
  printf("dense bf16 GEMM peak in this run: %.1f TFLOP/s\n", gemm_peak);

  if (csv) {
    FILE *f = fopen(csv, "w");
    if (!f) {
      fprintf(stderr, "cannot write %s\n", csv);
      return 2;
    }
    fprintf(f, "label,backend,us,tflops,tbps,pct\n");
    for (const measurement &m : results) {
      if (m.timed)
        fprintf(f, "\"%s\",%s,%.3f,%.3f,%.4f,%.2f\n", m.label.c_str(), m.backend_text().c_str(),
                m.graph_us, m.tflops(), m.tbps(), 100.0 * m.tflops() / gemm_peak);
      else
        fprintf(f, "\"%s\",%s,,,,\n", m.label.c_str(), m.backend_text().c_str());
    }
    fclose(f);
  }
  if (failures) printf("%d measurement(s) FAILED the correctness check or did not run\n", failures);
  return failures ? 1 : 0;
}
