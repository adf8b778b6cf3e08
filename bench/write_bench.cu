// pa_bench_write: throughput of the write path (shared by every backend, cuda/write/) against the
// device-to-device copy bandwidth measured in the same run (doc/performance.md, "Targets": target
// >= 80 % of copy at T = 8192 tokens, 8 KV heads, d128).
//
// Bytes counted per launch: K and V read + K and V written (in the cache type), plus Q read and Q
// written when the write path stages Q (the rotary rows). Block tables, positions and cos/sin are
// not counted. Two timings, both queued behind a spin kernel so that host launch overhead never
// shows, after warm-up:
//   - per launch (latency): each launch between its own pair of CUDA events, median of >= 100;
//     it includes the launch's fixed cost (the "empty kernel" figure, timed the same way);
//   - back to back (throughput): kBackToBack launches between one event pair, time / kBackToBack,
//     median of >= 10 such runs: what a serving loop that queues its kernels sees, where a launch's
//     fixed cost overlaps the previous launch;
//   - the same-size memcpy: a cudaMemcpyAsync moving the row's bytes, timed per launch like the
//     row ("of it" = memcpy time / row time): the ceiling a transfer that small reaches.
// Input sets and cache regions rotate ("sets") so that the working set is >= 4x L2, capped where
// the two caches would pass 512 MB (the decode shapes, whose sets each own one block per sequence).
// The caches and the staged Q of one launch are checked against the reference executor's write path
// on host copies before timing.
//
// Usage: pa_bench_write [--quick] [--only TEXT]
//   --only TEXT  only the rows whose label ("8192 fp16 unstaged", "256 int8 staged", ...)
//                contains TEXT (e.g. for a profiler)
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "host_numeric.h"
#include "internal.h"
#include "reference.h"

namespace {

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    cudaError_t err_ = (call);                                           \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(err_));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

constexpr int kHeads = 32, kKvHeads = 8, kHeadSize = 128, kBlockSize = 16;
constexpr int kBackToBack = 20;  // launches per event pair in the throughput timing

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

struct shape {
  int tokens, batch, past_max;
  bool rotary;     // rotary => Q is staged
  pa_dtype cache;  // FLOAT16 or INT8 (per-tensor scales)
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth, read + write counted, of a 1 GiB buffer.
double copy_bandwidth(cudaStream_t stream, int reps) {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemsetAsync(a, 1, bytes, stream));
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto &e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < 3; i++)
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
  for (int i = 0; i < reps; i++) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], stream));
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; i++) CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto &e : ev) CHECK_CUDA(cudaEventDestroy(e));
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * bytes / (median(ms) * 1e-3);
}

__global__ void empty_kernel() {}

// Median seconds per launch of launch(i): `runs` event pairs around `per_run` launches each, all
// queued behind a spin kernel (about 20 ms: the host queues everything behind it).
template <typename Launch>
double time_per_launch(cudaStream_t stream, int runs, int per_run, Launch launch) {
  std::vector<cudaEvent_t> ev(2 * runs);
  for (auto &e : ev) CHECK_CUDA(cudaEventCreate(&e));
  spin<<<1, 1, 0, stream>>>(40000000LL);
  for (int r = 0; r < runs; r++) {
    CHECK_CUDA(cudaEventRecord(ev[2 * r], stream));
    for (int i = 0; i < per_run; i++) launch(r * per_run + i);
    CHECK_CUDA(cudaEventRecord(ev[2 * r + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> ms(runs);
  for (int r = 0; r < runs; r++) CHECK_CUDA(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
  for (auto &e : ev) CHECK_CUDA(cudaEventDestroy(e));
  return median(ms) * 1e-3 / per_run;
}

// Seconds per cudaMemcpyAsync that moves `bytes_moved` (read + write counted, as the rows count
// theirs), timed per launch like the rows, over rotating slices of >= 4x L2: the ceiling a
// transfer of that size reaches, its own ramp and launch included.
double same_size_copy(cudaStream_t stream, double bytes_moved, size_t l2_bytes, int reps) {
  const size_t slice = (size_t)(bytes_moved / 2) / 256 * 256;
  const int slices = (int)std::max<size_t>(2, (4 * l2_bytes + slice - 1) / slice);
  char *src, *dst;
  CHECK_CUDA(cudaMalloc(&src, slice * slices));
  CHECK_CUDA(cudaMalloc(&dst, slice * slices));
  CHECK_CUDA(cudaMemsetAsync(src, 1, slice * slices, stream));
  auto copy = [&](int i) {
    const size_t offset = (size_t)(i % slices) * slice;
    CHECK_CUDA(
        cudaMemcpyAsync(dst + offset, src + offset, slice, cudaMemcpyDeviceToDevice, stream));
  };
  for (int i = 0; i < slices; i++) copy(i);
  const double seconds = time_per_launch(stream, reps, 1, copy);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  return seconds;
}

// Runs of kBackToBack launches for about as many launches as `reps` timed one by one, at least 10.
int back_to_back_runs(int reps) { return std::max(10, reps / kBackToBack); }

// The floor under every row's time: an empty kernel timed exactly as the rows are, alone and back
// to back. At T = 8192 the copy-speed time is ~16 us, so a few microseconds of floor weigh on the
// ratio.
struct launch_floor {
  double alone_us, back_to_back_us;
};
launch_floor measure_launch_floor(cudaStream_t stream, int reps) {
  auto launch = [&](int) { empty_kernel<<<1, 32, 0, stream>>>(); };
  launch(0);
  return {time_per_launch(stream, reps, 1, launch) * 1e6,
          time_per_launch(stream, back_to_back_runs(reps), kBackToBack, launch) * 1e6};
}

struct host_tensor {
  std::vector<unsigned char> bytes;
  void *device = nullptr;
};

// One benchmark row: builds the plan, the rotating input sets, checks one launch, times the rest.
struct write_case {
  pa_plan *plan = nullptr;
  pa_tensor_desc in[PA_NUM_INPUTS] = {}, out[PA_NUM_OUTPUTS] = {};
  int blocks_per_seq = 0, sets = 1;
  int64_t blocks_per_set = 0;
  host_tensor tensors[PA_NUM_INPUTS];
  std::vector<void *> queries, keys, values, table_ptrs;
  void *q_staged = nullptr;
  double bytes_per_launch = 0;

  size_t desc_bytes(const pa_tensor_desc &d) const {
    size_t n = pa_dtype_size(d.dtype);
    for (int i = 0; i < d.rank; i++) n *= size_t(d.dims[i]);
    return d.dtype == PA_DTYPE_UNDEFINED ? 0 : n;
  }
};

// Random fp16 values in [-1, 1) (a fast generator: the caches hold hundreds of millions of them).
void fill_half(std::vector<unsigned char> &dst, size_t count, std::mt19937 &rng) {
  uint64_t state = rng() | (uint64_t(rng()) << 32) | 1;
  dst.resize(count * 2);
  for (size_t i = 0; i < count; i++) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    __half h = __float2half_rn(float(state >> 40) * (2.0f / 16777216.0f) - 1.0f);
    std::memcpy(&dst[2 * i], &h, 2);
  }
}

// Whether a GPU value is within one step of the reference's: 1 (int8), 1 ULP (fp16), or 2e-6 near
// zero, where a rotation's cancellation magnifies fp32 rounding differences.
bool within_one_step(float gpu, float ref, bool int8) {
  if (int8) return std::fabs(gpu - ref) <= 1.0f;
  const float ulp = std::ldexp(1.0f, std::ilogb(std::max(std::fabs(ref), 6.1e-5f)) - 10);
  return std::fabs(gpu - ref) <= std::max(ulp, 2e-6f);
}

void *upload(const std::vector<unsigned char> &h) {
  void *d;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(h.size(), 16)));
  CHECK_CUDA(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  return d;
}

pa_tensor_desc desc(pa_dtype t, int rank, int64_t d0, int64_t d1 = 0, int64_t d2 = 0,
                    int64_t d3 = 0) {
  pa_tensor_desc d = {t, rank, {d0, d1, d2, d3}};
  return d;
}

// The write path of a launch on host copies of its inputs (lib/reference_write.c) against the
// device results.
bool check_against_reference(write_case &c, const void *const dev_in[PA_NUM_INPUTS]) {
  const pa__problem *p = &c.plan->problem;
  std::vector<std::vector<unsigned char>> host(PA_NUM_INPUTS);
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    size_t n = c.desc_bytes(c.in[i]);
    if (!n || !dev_in[i] || i == PA_IN_ATTENTION_METADATA) continue;
    host[i].resize(n);
    CHECK_CUDA(cudaMemcpy(host[i].data(), dev_in[i], n, cudaMemcpyDeviceToHost));
  }
  // the caches as they were before the launch
  host[PA_IN_KEY_CACHE] = c.tensors[PA_IN_KEY_CACHE].bytes;
  host[PA_IN_VALUE_CACHE] = c.tensors[PA_IN_VALUE_CACHE].bytes;
  const void *hin[PA_NUM_INPUTS] = {};
  void *hout[PA_NUM_OUTPUTS] = {};
  for (int i = 0; i < PA_NUM_INPUTS; i++) hin[i] = host[i].empty() ? nullptr : host[i].data();
  hout[PA_OUT_KEY_CACHE] = host[PA_IN_KEY_CACHE].data();
  hout[PA_OUT_VALUE_CACHE] = host[PA_IN_VALUE_CACHE].data();

  pa__ref_call call = {};
  call.p = p;
  call.io = pa__io_from(p, hin, hout);
  const int64_t n = p->token_count;
  std::vector<int32_t> sequence(n, -1);
  std::vector<int64_t> position(n, 0);
  const int32_t *cu = static_cast<const int32_t *>(hin[PA_IN_CUMULATIVE_SEQUENCE_LENGTH]);
  const int32_t *past = static_cast<const int32_t *>(hin[PA_IN_PAST_SEQLENS]);
  for (int b = 0; b < p->batch_size; b++)
    for (int64_t t = cu[b]; t < cu[b + 1]; t++) {
      sequence[t] = b;
      position[t] = past[b] + (t - cu[b]);
    }
  std::vector<float> q(size_t(n) * pa__q_row_elems(p)), kv_rows(2 * pa__kv_row_elems(p));
  call.sequence_of_token = sequence.data();
  call.position_of_token = position.data();
  call.q = q.data();
  call.kv_rows = kv_rows.data();
  pa__ref_write(&call);

  bool ok = true;
  const size_t cache_elem = pa_dtype_size(p->k_cache_dtype);
  for (int kv = 0; kv < 2 && ok; kv++) {
    const std::vector<unsigned char> &expected = host[PA_IN_KEY_CACHE + kv];
    std::vector<unsigned char> got(expected.size());
    CHECK_CUDA(
        cudaMemcpy(got.data(), dev_in[PA_IN_KEY_CACHE + kv], got.size(), cudaMemcpyDeviceToHost));
    for (size_t e = 0; e < expected.size() / cache_elem && ok; e++) {
      float a = pa__load_as_float(p->k_cache_dtype, got.data(), int64_t(e));
      float b = pa__load_as_float(p->k_cache_dtype, expected.data(), int64_t(e));
      if (!within_one_step(a, b, cache_elem == 1)) {
        std::fprintf(stderr, "check: %s element %zu: gpu %g, reference %g\n",
                     kv ? "value_cache" : "key_cache", e, a, b);
        ok = false;
      }
    }
  }
  if (ok && c.q_staged) {
    std::vector<__half> got(q.size());
    CHECK_CUDA(cudaMemcpy(got.data(), c.q_staged, got.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t e = 0; e < q.size() && ok; e++) {
      float a = __half2float(got[e]), b = q[e];
      if (!within_one_step(a, b, false)) {
        std::fprintf(stderr, "check: staged q element %zu: gpu %g, reference %g\n", e, a, b);
        ok = false;
      }
    }
  }
  return ok;
}

void run_case(const shape &s, double copy_bw, int reps, int warmup, size_t l2_bytes,
              cudaStream_t stream) {
  write_case c;
  std::mt19937 rng(1234u + unsigned(s.tokens) + (s.rotary ? 7u : 0u) + unsigned(s.cache));
  const int q_len = s.tokens / s.batch;
  c.blocks_per_seq = (s.past_max + q_len + kBlockSize - 1) / kBlockSize;
  c.blocks_per_set = int64_t(s.batch) * c.blocks_per_seq;

  const double cache_elem = pa_dtype_size(s.cache);
  const double kv_elems = double(s.tokens) * kKvHeads * kHeadSize;
  const double q_elems = double(s.tokens) * kHeads * kHeadSize;
  c.bytes_per_launch =
      2 * kv_elems * 2 + 2 * kv_elems * cache_elem + (s.rotary ? 2 * q_elems * 2 : 0);
  // enough sets for a working set of 4x L2, as long as the two caches stay within 512 MB
  const double cache_bytes_per_set =
      2.0 * double(c.blocks_per_set) * kBlockSize * kKvHeads * kHeadSize * cache_elem;
  const double sets_for_l2 = std::ceil(4.0 * double(l2_bytes) / c.bytes_per_launch);
  const double sets_for_memory = std::floor(512e6 / cache_bytes_per_set);
  c.sets = int(std::max(1.0, std::min({64.0, sets_for_l2, sets_for_memory})));
  const int64_t num_blocks = c.blocks_per_set * c.sets;

  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = kHeads;
  attrs.kv_num_heads = kKvHeads;
  attrs.do_rotary = s.rotary;
  if (s.cache == PA_DTYPE_INT8) attrs.k_quant_type = attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  const int max_positions = s.past_max + q_len;
  c.in[PA_IN_QUERY] = desc(PA_DTYPE_FLOAT16, 2, s.tokens, kHeads * kHeadSize);
  c.in[PA_IN_KEY] = c.in[PA_IN_VALUE] = desc(PA_DTYPE_FLOAT16, 2, s.tokens, kKvHeads * kHeadSize);
  c.in[PA_IN_KEY_CACHE] = c.in[PA_IN_VALUE_CACHE] =
      desc(s.cache, 4, num_blocks, kBlockSize, kKvHeads, kHeadSize);
  c.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, s.batch + 1);
  c.in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, s.batch);
  c.in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, s.batch, c.blocks_per_seq);
  if (s.rotary)
    c.in[PA_IN_COS_CACHE] = c.in[PA_IN_SIN_CACHE] =
        desc(PA_DTYPE_FLOAT16, 2, max_positions, kHeadSize / 2);
  if (s.cache == PA_DTYPE_INT8)
    c.in[PA_IN_K_SCALE] = c.in[PA_IN_V_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1);
  c.out[PA_OUT_OUTPUT] = desc(PA_DTYPE_FLOAT16, 2, s.tokens, kHeads * kHeadSize);
  c.out[PA_OUT_KEY_CACHE] = c.in[PA_IN_KEY_CACHE];
  c.out[PA_OUT_VALUE_CACHE] = c.in[PA_IN_VALUE_CACHE];

  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = PA_BACKEND_REFERENCE;  // the write path alone: no attention backend is involved
  if (pa_plan_create(&c.plan, &attrs, c.in, c.out, &options) != PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    std::fprintf(stderr, "pa_plan_create: %s\n", msg);
    std::exit(1);
  }

  // constant inputs
  std::vector<int32_t> cu(s.batch + 1), past(s.batch);
  for (int b = 0; b < s.batch; b++) {
    cu[b + 1] = cu[b] + q_len;
    past[b] = s.past_max ? int32_t(rng() % unsigned(s.past_max + 1)) : 0;
  }
  void *d_cu = upload(std::vector<unsigned char>((unsigned char *)cu.data(),
                                                 (unsigned char *)(cu.data() + cu.size())));
  void *d_past = upload(std::vector<unsigned char>((unsigned char *)past.data(),
                                                   (unsigned char *)(past.data() + past.size())));
  void *d_cos = nullptr, *d_sin = nullptr, *d_scale = nullptr;
  if (s.rotary) {
    std::vector<unsigned char> cos_b(size_t(max_positions) * kHeadSize), sin_b(cos_b.size());
    for (int pos = 0; pos < max_positions; pos++)
      for (int i = 0; i < kHeadSize / 2; i++) {
        double angle = pos * std::pow(10000.0, -2.0 * i / kHeadSize);
        __half cv = __float2half_rn(float(std::cos(angle))),
               sv = __float2half_rn(float(std::sin(angle)));
        std::memcpy(&cos_b[2 * (size_t(pos) * kHeadSize / 2 + i)], &cv, 2);
        std::memcpy(&sin_b[2 * (size_t(pos) * kHeadSize / 2 + i)], &sv, 2);
      }
    d_cos = upload(cos_b);
    d_sin = upload(sin_b);
  }
  if (s.cache == PA_DTYPE_INT8) {
    float scale = 2.0f / 127.0f;
    std::vector<unsigned char> sb(4);
    std::memcpy(sb.data(), &scale, 4);
    d_scale = upload(sb);
  }
  // caches: random initial content, kept on the host for the check
  for (int kv = 0; kv < 2; kv++) {
    std::vector<unsigned char> &h = c.tensors[PA_IN_KEY_CACHE + kv].bytes;
    size_t count = c.desc_bytes(c.in[PA_IN_KEY_CACHE]) / pa_dtype_size(s.cache);
    if (s.cache == PA_DTYPE_INT8) {
      h.resize(count);
      for (auto &byte : h) byte = (unsigned char)rng();
    } else {
      fill_half(h, count, rng);
    }
    c.tensors[PA_IN_KEY_CACHE + kv].device = upload(h);
  }
  // per set: fresh Q/K/V and a block table over that set's own (shuffled) blocks
  std::vector<int32_t> ids(num_blocks);
  for (int64_t i = 0; i < num_blocks; i++) ids[i] = int32_t(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int set = 0; set < c.sets; set++) {
    std::vector<unsigned char> q, k, v;
    fill_half(q, size_t(q_elems), rng);
    fill_half(k, size_t(kv_elems), rng);
    fill_half(v, size_t(kv_elems), rng);
    c.queries.push_back(upload(q));
    c.keys.push_back(upload(k));
    c.values.push_back(upload(v));
    std::vector<int32_t> table(ids.begin() + set * c.blocks_per_set,
                               ids.begin() + (set + 1) * c.blocks_per_set);
    c.table_ptrs.push_back(upload(std::vector<unsigned char>(
        (unsigned char *)table.data(), (unsigned char *)(table.data() + table.size()))));
  }
  const pa__problem *p = &c.plan->problem;
  pa__workspace_layout ws = {};
  const int q_region = pa__write_workspace(p, &ws);
  if (q_region >= 0) CHECK_CUDA(cudaMalloc(&c.q_staged, ws.regions[q_region].bytes));

  std::vector<pa__io> io(c.sets);
  std::vector<std::vector<const void *>> set_inputs(
      c.sets, std::vector<const void *>(PA_NUM_INPUTS, nullptr));
  void *outputs[PA_NUM_OUTPUTS] = {nullptr, c.tensors[PA_IN_KEY_CACHE].device,
                                   c.tensors[PA_IN_VALUE_CACHE].device, nullptr};
  for (int set = 0; set < c.sets; set++) {
    std::vector<const void *> &in = set_inputs[set];
    in[PA_IN_QUERY] = c.queries[set];
    in[PA_IN_KEY] = c.keys[set];
    in[PA_IN_VALUE] = c.values[set];
    in[PA_IN_KEY_CACHE] = c.tensors[PA_IN_KEY_CACHE].device;
    in[PA_IN_VALUE_CACHE] = c.tensors[PA_IN_VALUE_CACHE].device;
    in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = d_cu;
    in[PA_IN_PAST_SEQLENS] = d_past;
    in[PA_IN_BLOCK_TABLE] = c.table_ptrs[set];
    in[PA_IN_COS_CACHE] = d_cos;
    in[PA_IN_SIN_CACHE] = d_sin;
    in[PA_IN_K_SCALE] = d_scale;
    in[PA_IN_V_SCALE] = d_scale;
    io[set] = pa__io_from(p, in.data(), outputs);
    if (c.q_staged) {
      io[set].q_staged = c.q_staged;
      io[set].q_attn = c.q_staged;
      io[set].q_attn_row_stride = pa__q_row_elems(p);
    }
  }
  auto launch = [&](int set) {
    pa_status st = pa__write_run(c.plan, &io[set], reinterpret_cast<pa__stream>(stream));
    if (st != PA_SUCCESS) {
      char msg[512];
      pa_last_error_message(msg, sizeof msg);
      std::fprintf(stderr, "pa__write_run: %s\n", msg);
      std::exit(1);
    }
  };

  launch(0);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const bool ok = check_against_reference(c, set_inputs[0].data());

  for (int i = 0; i < warmup; i++) launch(i % c.sets);
  auto rotating = [&](int i) { launch(i % c.sets); };
  const double alone = time_per_launch(stream, reps, 1, rotating);
  const double back_to_back =
      time_per_launch(stream, back_to_back_runs(reps), kBackToBack, rotating);
  const double memcpy_alone = same_size_copy(stream, c.bytes_per_launch, l2_bytes, reps);
  std::printf("%6d %6d %6s %8s %5d %9.2f %9.2f %7.1f %% %9.2f %7.1f %% %9.2f %7.1f %%  %s\n",
              s.tokens, s.batch, s.cache == PA_DTYPE_INT8 ? "int8" : "fp16",
              s.rotary ? "yes" : "no", c.sets, c.bytes_per_launch / 1e6, alone * 1e6,
              100.0 * c.bytes_per_launch / alone / copy_bw, back_to_back * 1e6,
              100.0 * c.bytes_per_launch / back_to_back / copy_bw, memcpy_alone * 1e6,
              100.0 * memcpy_alone / alone, ok ? "ok" : "FAILED");

  for (int set = 0; set < c.sets; set++) {
    cudaFree(c.queries[set]);
    cudaFree(c.keys[set]);
    cudaFree(c.values[set]);
    cudaFree(c.table_ptrs[set]);
  }
  cudaFree(c.tensors[PA_IN_KEY_CACHE].device);
  cudaFree(c.tensors[PA_IN_VALUE_CACHE].device);
  cudaFree(c.q_staged);
  cudaFree(d_cu);
  cudaFree(d_past);
  cudaFree(d_cos);
  cudaFree(d_sin);
  cudaFree(d_scale);
  pa_plan_destroy(c.plan);
  if (!ok) std::exit(1);
}

}  // namespace

// The label --only matches: tokens, cache type, whether Q is staged.
std::string label_of(const shape &s) {
  return std::to_string(s.tokens) + (s.cache == PA_DTYPE_INT8 ? " int8" : " fp16") +
         (s.rotary ? " staged" : " unstaged");
}

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // rows already printed survive a timeout or a crash
  bool quick = false;
  const char *only = nullptr;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only TEXT]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "pa_bench_write: no CUDA device\n");
    return 77;
  }
  int l2 = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = quick ? 100 : 300, warmup = quick ? 10 : 30;
  const double copy_bw = copy_bandwidth(stream, quick ? 10 : 30);
  const launch_floor floor = measure_launch_floor(stream, reps);
  std::printf(
      "write path: %d/%d heads, d%d, block %d, fp16 activations; copy D2D %.3f TB/s "
      "(read + write); empty kernel %.2f us per launch, %.2f us back to back; median of %d "
      "launches, of runs of %d back to back\n",
      kHeads, kKvHeads, kHeadSize, kBlockSize, copy_bw / 1e12, floor.alone_us,
      floor.back_to_back_us, reps, kBackToBack);
  std::printf("%6s %6s %6s %8s %5s %9s %19s %19s %19s  %s\n", "", "", "", "", "", "",
              "per launch", "back to back", "same-size memcpy", "");
  std::printf("%6s %6s %6s %8s %5s %9s %9s %9s %9s %9s %9s %9s  %s\n", "tokens", "batch", "cache",
              "Q staged", "sets", "MB moved", "us", "of copy", "us", "of copy", "us", "of it",
              "check");
  // decode-shaped (one token per sequence, short pasts) and prefill-shaped (4 x 2048)
  const shape shapes[] = {
      {256, 256, 15, false, PA_DTYPE_FLOAT16}, {256, 256, 15, true, PA_DTYPE_FLOAT16},
      {256, 256, 15, false, PA_DTYPE_INT8},    {256, 256, 15, true, PA_DTYPE_INT8},
      {8192, 4, 0, false, PA_DTYPE_FLOAT16},   {8192, 4, 0, true, PA_DTYPE_FLOAT16},
      {8192, 4, 0, false, PA_DTYPE_INT8},      {8192, 4, 0, true, PA_DTYPE_INT8},
  };
  for (const shape &s : shapes)
    if (!only || label_of(s).find(only) != std::string::npos)
      run_case(s, copy_bw, reps, warmup, size_t(l2), stream);
  std::printf("target: >= 80 %% of copy at 8192 tokens\n");
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
