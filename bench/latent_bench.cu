// pa_bench_latent: the absorbed MLA decode rows of issue 17 on PA_BACKEND_LATENT, with UNFUSED (the
// path LATENT replaces) timed in the same run as the anchor.
//
// Rows, bf16 latent row 576 / 512 (V the first 512 channels), block 64 and block 16:
//   compute-bound: 128 heads, B x L = 64 x 4k and 128 x 4k, 1 and 2 query tokens per sequence:
//     TFLOP/s = 2 * heads * tokens * L * (576 + 512) per sequence / time, and % of a dense 8192^3
//     bf16 GEMM (cuBLASLt) measured in the same run;
//   memory-bound: 16 heads, 64 x 4k and 1 x 64k: TB/s = the latent rows read once
//     (B * L * 576 * element bytes) / time, and % of a device-to-device copy (read + write
//     counted) measured in the same run; beside each, a read-only pass over the same cache
//     ("read alone", graph-timed the same way): the floor of any step that reads those rows, and
//     how far the step is above it;
//   32 rows per sequence: 32 heads x 1 token and 16 heads x 2 tokens, 64 x 4k at block 64, in TB/s;
//   8-bit latent caches (per-tensor scale): fp8 at 128 heads 64 x 4k block 64 and at 16 heads
//     64 x 4k (block 64 and 16, 1 and 2 query tokens) and 1 x 64k, int8 at 16 heads 64 x 4k
//     block 64.
// Each step writes its new tokens' latent rows (the write path) and reads L keys per sequence
// (L - tokens cached + the new ones). Random data filled on the device, a shuffled block table,
// attention_metadata with the tight bounds. LATENT's first run is checked against UNFUSED's on the
// whole output (|a - b| <= 2e-2 (1 + |b|), the bf16 / 8-bit tolerance); then both are timed as
// CUDA-graph replays (median; UNFUSED by few replays: it takes tens to hundreds of ms a step).
//   pa_bench_latent [--quick] [--only TEXT] [--csv FILE]
//     --quick      the 1-token rows at 64 x 4k, 1 x 64k, the 32-row rows and 8-bit only, UNFUSED
//                  on one row
//     --only TEXT  only the rows whose label contains TEXT (e.g. for a profiler)
//     --csv FILE   also write label,backend,us,tflops,tbps,pct to FILE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "bench_common.cuh"
#include "bench_peaks.cuh"
#include "pagedattn/pagedattn.h"

namespace {

using bench::copy_tbps;
using bench::desc;
using bench::desc_bytes;
using bench::fill;
using bench::gemm_peak_tflops;
using bench::median_us;

constexpr int kLatent = 576, kValue = 512;

struct row {
  std::string label;
  int heads, batch, kv_len, tokens, block;
  pa_dtype cache;
  bool memory_bound;  // report TB/s and % of copy instead of TFLOP/s and % of the GEMM peak
  bool anchor;        // time UNFUSED too
};

struct timing {
  double us = 0;
  bool ok = false;
};

// One step of `r` on the device: descriptors, buffers, and a plan per backend.
struct step {
  pa_attributes attrs;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  void *d_in[PA_NUM_INPUTS] = {};
  void *d_out = nullptr;
  int32_t metadata[2];

  explicit step(const row &r, uint64_t seed) {
    const int64_t n = (int64_t)r.batch * r.tokens;
    const int blocks_per_seq = (r.kv_len + r.block - 1) / r.block;
    const int64_t num_blocks = (int64_t)r.batch * blocks_per_seq;
    pa_attributes_init(&attrs);
    attrs.num_heads = r.heads;
    attrs.kv_num_heads = 1;
    attrs.kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
    attrs.v_head_size = kValue;
    attrs.scale = 0.1352f;
    const bool quantized = r.cache != PA_DTYPE_BFLOAT16;
    if (quantized) attrs.k_quant_type = PA_QUANT_PER_TENSOR;
    for (auto &d : in) d = desc(PA_DTYPE_UNDEFINED, 0, 0);
    for (auto &d : out) d = desc(PA_DTYPE_UNDEFINED, 0, 0);
    in[PA_IN_QUERY] = desc(PA_DTYPE_BFLOAT16, 2, n, (int64_t)r.heads * kLatent);
    in[PA_IN_KEY] = desc(PA_DTYPE_BFLOAT16, 2, n, kLatent);
    in[PA_IN_KEY_CACHE] = desc(r.cache, 4, num_blocks, r.block, 1, kLatent);
    in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, r.batch + 1);
    in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, r.batch);
    in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, r.batch, blocks_per_seq);
    if (quantized) in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1);
    in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2);  // values: pa_plan_options
    out[PA_OUT_OUTPUT] = desc(PA_DTYPE_BFLOAT16, 2, n, (int64_t)r.heads * kValue);
    for (int i = 0; i < PA_NUM_INPUTS; i++)
      if (i != PA_IN_ATTENTION_METADATA && in[i].dtype != PA_DTYPE_UNDEFINED)
        CHECK_CUDA(cudaMalloc(&d_in[i], desc_bytes(in[i])));
    CHECK_CUDA(cudaMalloc(&d_out, desc_bytes(out[PA_OUT_OUTPUT])));
    fill(d_in[PA_IN_QUERY], n * r.heads * kLatent, PA_DTYPE_BFLOAT16, 1.0f, seed + 1);
    fill(d_in[PA_IN_KEY], n * kLatent, PA_DTYPE_BFLOAT16, 1.0f, seed + 2);
    fill(d_in[PA_IN_KEY_CACHE], num_blocks * r.block * kLatent, r.cache, 1.0f, seed + 3);
    std::vector<int32_t> cu(r.batch + 1), past(r.batch), table((size_t)num_blocks);
    for (int b = 0; b <= r.batch; b++) cu[b] = b * r.tokens;
    for (int b = 0; b < r.batch; b++) past[b] = r.kv_len - r.tokens;
    for (int64_t i = 0; i < num_blocks; i++) table[i] = (int32_t)i;
    uint64_t s = seed;
    for (int64_t i = num_blocks - 1; i > 0; i--) {  // a shuffled block table
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(table[i], table[(int64_t)((s >> 33) % (uint64_t)(i + 1))]);
    }
    CHECK_CUDA(cudaMemcpy(d_in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], cu.data(), cu.size() * 4,
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_in[PA_IN_PAST_SEQLENS], past.data(), past.size() * 4,
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_in[PA_IN_BLOCK_TABLE], table.data(), table.size() * 4,
                          cudaMemcpyHostToDevice));
    if (quantized) {
      const float scale = r.cache == PA_DTYPE_INT8 ? 1.0f / 127.0f : 1.0f / 16.0f;
      CHECK_CUDA(cudaMemcpy(d_in[PA_IN_K_SCALE], &scale, 4, cudaMemcpyHostToDevice));
    }
    metadata[0] = r.tokens;
    metadata[1] = r.kv_len;
  }
  ~step() {
    for (void *p : d_in) cudaFree(p);
    cudaFree(d_out);
  }

  // Runs the step on `backend` into d_out, times it by graph replays (per_sample replays of
  // `samples`); false when the plan is refused.
  timing run(pa_backend backend, cudaStream_t stream, int samples, int per_sample) {
    timing t;
    pa_plan_options options;
    pa_plan_options_init(&options);
    options.backend = backend;
    options.attention_metadata = metadata;
    pa_plan *plan = nullptr;
    if (pa_plan_create(&plan, &attrs, in, out, &options) != PA_SUCCESS) {
      char msg[512];
      pa_last_error_message(msg, sizeof msg);
      printf("  %s: not planned: %s\n", pa_backend_name(backend), msg);
      return t;
    }
    const size_t ws_bytes = pa_plan_workspace_size(plan);
    void *ws = nullptr;
    CHECK_CUDA(cudaMalloc(&ws, ws_bytes ? ws_bytes : 1));
    void *outputs[PA_NUM_OUTPUTS] = {d_out, nullptr, nullptr, nullptr};
    auto exec = [&]() {
      const pa_status st = pa_execute(plan, d_in, outputs, ws, ws_bytes, stream);
      if (st != PA_SUCCESS) {
        fprintf(stderr, "pa_execute (%s): %s\n", pa_backend_name(backend), pa_status_string(st));
        exit(2);
      }
    };
    exec();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    t.us = bench::graph_median_us(stream, 2, samples, per_sample, exec);
    t.ok = true;
    CHECK_CUDA(cudaFree(ws));
    pa_plan_destroy(plan);
    return t;
  }
};

float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

std::vector<uint16_t> copy_out(const step &s) {
  std::vector<uint16_t> v(desc_bytes(s.out[PA_OUT_OUTPUT]) / 2);
  CHECK_CUDA(cudaMemcpy(v.data(), s.d_out, v.size() * 2, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // rows already printed survive a timeout or a crash
  bool quick = false;
  const char *only = nullptr, *csv_path = nullptr;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--only TEXT] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  std::vector<row> rows;
  for (int block : {64, 16}) {
    const std::string b = " block " + std::to_string(block);
    for (int tokens : {1, 2})
      for (int batch : {64, 128}) {
        if (quick && (tokens == 2 || batch == 128)) continue;
        rows.push_back({"128h " + std::to_string(batch) + "x4k q" + std::to_string(tokens) + b, 128,
                        batch, 4096, tokens, block, PA_DTYPE_BFLOAT16, false,
                        !quick || block == 64});
      }
    rows.push_back({"16h 64x4k q1" + b, 16, 64, 4096, 1, block, PA_DTYPE_BFLOAT16, true, !quick});
    rows.push_back({"16h 1x64k q1" + b, 16, 1, 65536, 1, block, PA_DTYPE_BFLOAT16, true, !quick});
  }
  // 32 rows per sequence, the narrow wgmma kernel's other width
  rows.push_back({"32h 64x4k q1 block 64", 32, 64, 4096, 1, 64, PA_DTYPE_BFLOAT16, true, false});
  rows.push_back({"16h 64x4k q2 block 64", 16, 64, 4096, 2, 64, PA_DTYPE_BFLOAT16, true, false});
  rows.push_back({"128h 64x4k q1 block 64 fp8", 128, 64, 4096, 1, 64, PA_DTYPE_FLOAT8_E4M3FN,
                  false, false});
  rows.push_back({"16h 64x4k q1 block 64 fp8", 16, 64, 4096, 1, 64, PA_DTYPE_FLOAT8_E4M3FN, true,
                  false});
  rows.push_back({"16h 64x4k q1 block 16 fp8", 16, 64, 4096, 1, 16, PA_DTYPE_FLOAT8_E4M3FN, true,
                  false});
  rows.push_back({"16h 1x64k q1 block 64 fp8", 16, 1, 65536, 1, 64, PA_DTYPE_FLOAT8_E4M3FN, true,
                  false});
  rows.push_back({"16h 64x4k q1 block 64 int8", 16, 64, 4096, 1, 64, PA_DTYPE_INT8, true, false});
  rows.push_back({"16h 64x4k q2 block 64 fp8", 16, 64, 4096, 2, 64, PA_DTYPE_FLOAT8_E4M3FN, true,
                  false});

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double gemm = gemm_peak_tflops(stream, 8192), copy = copy_tbps(stream);
  printf("device %s, %d SMs; dense bf16 GEMM %.1f TFLOP/s, device-to-device copy %.2f TB/s "
         "(read + write)\n",
         prop.name, prop.multiProcessorCount, gemm, copy);
  const char *family = getenv("PA_LATENT_KERNEL");
  printf("LATENT kernels: %s\n", family && !strcmp(family, "mma.sync")
                                      ? "mma.sync (PA_LATENT_KERNEL)"
                                      : "the plan's choice (wgmma on compute capability 9.0 for "
                                        "16-bit caches at 576 / 512, else "
                                        "mma.sync)");
  FILE *csv = csv_path ? fopen(csv_path, "w") : nullptr;
  if (csv) fprintf(csv, "label,backend,us,tflops,tbps,pct\n");
  int failures = 0;
  std::vector<std::pair<std::string, double>> latent_us;
  for (const row &r : rows) {
    if (only && r.label.find(only) == std::string::npos) continue;
    step s(r, 1234);
    const double flops = 2.0 * r.heads * (double)r.batch * r.tokens * r.kv_len * (kLatent + kValue);
    const double bytes = (double)r.batch * r.kv_len * kLatent * pa_dtype_size(r.cache);
    auto report = [&](const char *backend, const timing &t) {
      if (!t.ok) return;
      const double tflops = flops / (t.us * 1e-6) / 1e12, tbps = bytes / (t.us * 1e-6) / 1e12;
      const double pct = r.memory_bound ? 100.0 * tbps / copy : 100.0 * tflops / gemm;
      printf("%-30s %-7s %10.1f us %7.1f TFLOP/s %6.2f TB/s %5.1f%% of %s\n", r.label.c_str(),
             backend, t.us, tflops, tbps, pct, r.memory_bound ? "copy" : "the GEMM peak");
      if (csv)
        fprintf(csv, "%s,%s,%.2f,%.2f,%.3f,%.1f\n", r.label.c_str(), backend, t.us, tflops, tbps,
                pct);
    };
    std::vector<uint16_t> anchor;
    timing unfused;
    if (r.anchor) {
      unfused = s.run(PA_BACKEND_UNFUSED, stream, 3, 1);
      if (unfused.ok) anchor = copy_out(s);
    }
    const timing latent = s.run(PA_BACKEND_LATENT, stream, 20, 10);
    if (!anchor.empty() && latent.ok) {
      const std::vector<uint16_t> got = copy_out(s);
      double worst = 0;
      for (size_t i = 0; i < got.size(); i++) {
        const double a = bf16_to_float(got[i]), b = bf16_to_float(anchor[i]);
        const double e = fabs(a - b) / (1.0 + fabs(b));
        worst = std::max(worst, std::isnan(e) ? INFINITY : e);
      }
      const bool ok = worst <= 2e-2;
      failures += !ok;
      printf("%-30s LATENT vs UNFUSED: worst %.1e %s\n", r.label.c_str(), worst,
             ok ? "ok" : "FAILED CHECK");
    }
    report("LATENT", latent);
    report("UNFUSED", unfused);
    if (r.memory_bound && latent.ok) {
      const double read_us = bench::read_stream_us(stream, s.d_in[PA_IN_KEY_CACHE], (size_t)bytes,
                                                   20, 10);
      const double tbps = bytes / (read_us * 1e-6) / 1e12;
      printf("%-30s read alone %7.1f us %15s %6.2f TB/s %5.1f%% of copy; the step: read + %.1f us\n",
             r.label.c_str(), read_us, "", tbps, 100.0 * tbps / copy, latent.us - read_us);
    }
    if (latent.ok) latent_us.push_back({r.label, latent.us});
  }
  // block 16 against block 64 on the same shape
  for (const auto &a : latent_us) {
    const size_t at = a.first.find(" block 16");
    if (at == std::string::npos) continue;
    std::string other = a.first;
    other.replace(at, 9, " block 64");
    for (const auto &b : latent_us)
      if (b.first == other)
        printf("%-30s block 16 / block 64: %.3f\n", a.first.c_str(), a.second / b.second);
  }
  if (csv) fclose(csv);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return failures ? 1 : 0;
}
