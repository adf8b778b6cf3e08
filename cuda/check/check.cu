// The device contract checker's launcher (the kernel is in check_kernel.cuh; doc/api.md, "Checking
// device data"). pa__check_plan adds two workspace regions, first in the layout: the status, kept
// across calls at offset 0, and the per-call scratch (finish counter, slot bitmaps, partials),
// cleared by a memset node before each launch; and fixes the launch. pa__check_run fills in the
// call's pointers and launches on the caller's stream. pa__check_report reads the status back,
// turns it into a message and clears it.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../launch_common.cuh"
#include "check_kernel.cuh"
#include "internal.h"

namespace pa {
namespace detail {
namespace {

// The CTAs of a launch: enough for one element per thread, at most a few waves.
constexpr int64_t kCheckMaxCtasPerSm = 4;
constexpr int64_t kCheckMaxCtas = 1024;
constexpr uint64_t kScratchHeaderBytes = 256;  // the finish counter, padded
static_assert(sizeof(check_status) <= PA_CHECK_STATUS_BYTES, "the status outgrew its bytes");

struct check_state {
  check_params params;  // less the call's pointers
  unsigned grid;
  int status_region, scratch_region;
  uint64_t bitmap_words;    // per bitmap
  uint64_t cleared_bytes;   // counter and bitmaps, from the scratch region's start; the
                            // partials follow
};

pa_status plan_check(pa_plan *plan) {
  const pa__problem &p = plan->problem;
  if (plan->workspace.count != 0)
    return pa__fail(PA_ERROR_INTERNAL, "contract check: its regions must come first");
  check_state *s = (check_state *)calloc(1, sizeof *s);
  if (!s) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->check_state = s;

  check_params &prm = s->params;
  prm.token_count = p.token_count;
  prm.num_blocks = p.num_blocks;
  prm.cache_slots = p.num_blocks * p.block_size;  // fits: the cache's byte size does (V50)
  prm.batch_size = p.batch_size;
  prm.max_blocks_per_seq = p.max_blocks_per_seq;
  prm.block_size = p.block_size;
  prm.window = p.window;
  prm.table_entries = (int64_t)p.batch_size * p.max_blocks_per_seq;  // block_table's size fits
  prm.elements = (int64_t)p.batch_size + 1 + prm.table_entries + p.token_count;
  prm.rotary_positions = p.do_rotary ? p.rotary_max_positions : 0;
  prm.query_len_bound = p.query_len_bound;
  prm.kv_len_bound = p.kv_len_bound;
  prm.bias_query_capacity = p.has_bias ? p.bias_q_capacity : 0;
  prm.bias_key_capacity = p.has_bias ? p.bias_kv_capacity : 0;
  prm.qk_capacity = p.qk_output ? p.qk_capacity : 0;

  int64_t ctas = ceil_div(prm.elements, kCheckThreads);
  const int64_t sms = plan->caps.multiprocessor_count > 0 ? plan->caps.multiprocessor_count : 1;
  if (ctas > kCheckMaxCtasPerSm * sms) ctas = kCheckMaxCtasPerSm * sms;
  if (ctas > kCheckMaxCtas) ctas = kCheckMaxCtas;
  s->grid = (unsigned)ctas;

  // the scratch: counter, two bitmaps, then the partials (8-byte aligned: the bitmaps' bytes are
  // a multiple of 8)
  s->bitmap_words = ((uint64_t)prm.cache_slots + 31) / 32;
  uint64_t bitmaps_bytes = 0, scratch_bytes = 0;
  if (!pa__mul_u64(s->bitmap_words, 2 * sizeof(uint32_t), &bitmaps_bytes) ||
      !pa__add_u64(kScratchHeaderBytes, bitmaps_bytes, &s->cleared_bytes) ||
      !pa__add_u64(s->cleared_bytes, (uint64_t)ctas * sizeof(check_record), &scratch_bytes))
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "contract check: its slot bitmaps overflow 64 bits");
  s->status_region = pa__workspace_add(&plan->workspace, "contract check status (kept)", 1,
                                       sizeof(check_status), PA_WORKSPACE_ALIGNMENT);
  s->scratch_region = pa__workspace_add(&plan->workspace,
                                        "contract check scratch (counter, slot bitmaps, partials)",
                                        scratch_bytes, 1, PA_WORKSPACE_ALIGNMENT);
  return PA_SUCCESS;  // an overflowed layout is refused by pa_plan_create
}

// The violation as a message naming the tensor, the index and the value.
void violation_message(const check_record &r, char *out, size_t size) {
  const long long i = r.index, i2 = r.index2, v = r.value, limit = r.limit;
  switch (r.rule) {
    case kCuFirstNotZero:
      snprintf(out, size, "cumulative_sequence_length[0]: expected 0, got %lld", v);
      break;
    case kCuOutOfRange:
      snprintf(out, size,
               "cumulative_sequence_length[%lld]: expected a value in [0, token_count = %lld], "
               "got %lld",
               i, limit, v);
      break;
    case kCuDecreasing:
      snprintf(out, size,
               "cumulative_sequence_length[%lld]: expected >= cumulative_sequence_length[%lld] = "
               "%lld (non-decreasing), got %lld",
               i, i - 1, limit, v);
      break;
    case kPastNegative:
      snprintf(out, size, "past_seqlens[%lld]: expected >= 0, got %lld", i, v);
      break;
    case kKvLenOverflow:
      snprintf(out, size,
               "past_seqlens[%lld]: expected past_seqlens + the sequence's %lld new tokens <= "
               "INT32_MAX, got %lld",
               i, limit, v);
      break;
    case kBlockIdOutOfRange:
      snprintf(out, size,
               "block_table[%lld][%lld]: expected -1 or a block id in [0, num_blocks = %lld) "
               "(sequence %lld reads or writes through this entry), got %lld",
               i, i2, limit, i, v);
      break;
    case kPositionBeyondRotary:
      if (i2 < 0)
        snprintf(out, size,
                 "query_positions[%lld]: expected a position below cos_cache / sin_cache's %lld "
                 "rows (do_rotary), got %lld",
                 i, limit, v);
      else
        snprintf(out, size,
                 "past_seqlens[%lld]: token %lld's position (past_seqlens[%lld] + its index in the "
                 "sequence) must be below cos_cache / sin_cache's %lld rows (do_rotary), got %lld",
                 i2, i, i2, limit, v);
      break;
    case kSlotOutOfRange:
      snprintf(out, size,
               "slot_mapping[%lld]: expected -1 or a slot in [0, num_blocks * block_size = %lld), "
               "got %lld",
               i, limit, v);
      break;
    case kSlotWrittenTwice:
      if (limit)
        snprintf(out, size,
                 "slot_mapping[%lld]: expected a slot no other token of the call writes, got "
                 "%lld, which slot_mapping[%lld] writes too",
                 i, v, i2);
      else
        snprintf(out, size,
                 "block_table: token %lld's slot %lld (derived from block_table and its position) "
                 "is written by token %lld too: expected one writer per slot",
                 i, v, i2);
      break;
    case kQueryLenAboveBound:
      snprintf(out, size,
               "attention_metadata[0] = %lld: expected a bound on every sequence's new tokens, "
               "got sequence %lld with %lld (cumulative_sequence_length[%lld] - [%lld])",
               limit, i, v, i + 1, i);
      break;
    case kKvLenAboveBound:
      snprintf(out, size,
               "attention_metadata[1] = %lld: expected a bound on every sequence's kv length, got "
               "sequence %lld with %lld (past_seqlens[%lld] + its new tokens)",
               limit, i, v, i);
      break;
    case kPositionNegative:
      snprintf(out, size, "query_positions[%lld]: expected >= 0, got %lld", i, v);
      break;
    case kBiasQueryCapacity:
      snprintf(out, size,
               "attention_bias: dim 2 (query capacity) = %lld: expected >= every sequence's new "
               "tokens, got sequence %lld with %lld",
               limit, i, v);
      break;
    case kBiasKeyCapacity:
      snprintf(out, size,
               "attention_bias: dim 3 (kv capacity) = %lld: expected >= every sequence's kv "
               "length, got sequence %lld with %lld",
               limit, i, v);
      break;
    case kQkCapacity:
      snprintf(out, size,
               "output_qk: dim 2 (capacity) = %lld: expected >= every sequence's kv length, got "
               "sequence %lld with %lld",
               limit, i, v);
      break;
    default:
      snprintf(out, size, "contract check: unknown rule %d in the status (a corrupted workspace)",
               (int)r.rule);
  }
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" pa_status pa__check_plan(pa_plan *plan) { return pa::detail::plan_check(plan); }

extern "C" pa_status pa__check_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  using namespace pa::detail;
  const check_state *s = static_cast<const check_state *>(plan->check_state);
  check_params prm = s->params;
  prm.cu_seqlens = io->cu_seqlens;
  prm.past_seqlens = io->past_seqlens;
  prm.block_table = io->block_table;
  prm.slot_mapping = io->slot_mapping;
  prm.query_positions = io->query_positions;
  prm.status = static_cast<check_status *>(
      pa__workspace_at(&plan->workspace, s->status_region, io->workspace));
  char *scratch =
      static_cast<char *>(pa__workspace_at(&plan->workspace, s->scratch_region, io->workspace));
  prm.finished_ctas = reinterpret_cast<unsigned *>(scratch);
  prm.slots_written = reinterpret_cast<uint32_t *>(scratch + kScratchHeaderBytes);
  prm.slots_twice = prm.slots_written + s->bitmap_words;
  prm.partials = reinterpret_cast<check_record *>(scratch + s->cleared_bytes);
  const cudaStream_t cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t err = cudaMemsetAsync(scratch, 0, s->cleared_bytes, cuda_stream);
  if (err == cudaSuccess)
    err = launch_chained(check_kernel, dim3(s->grid), kCheckThreads, 0, cuda_stream, false, prm);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "contract check: launch failed: %s", cudaGetErrorString(err));
  return PA_SUCCESS;
}

extern "C" pa_status pa__check_report(const pa_plan *plan, const void *workspace,
                                      pa__stream stream, char *message, size_t size) {
  using namespace pa::detail;
  const check_state *s = static_cast<const check_state *>(plan->check_state);
  const cudaStream_t cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(cuda_stream, &capture);
  if (err == cudaSuccess && capture != cudaStreamCaptureStatusNone)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "stream: is being captured; pa_plan_check_status synchronizes it, so call it "
                    "outside the capture");
  void *device_status = pa__workspace_at(&plan->workspace, s->status_region, (void *)workspace);
  check_status status;
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(&status, device_status, sizeof status, cudaMemcpyDeviceToHost,
                          cuda_stream);
  if (err == cudaSuccess) err = cudaMemsetAsync(device_status, 0, sizeof status, cuda_stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(cuda_stream);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "contract check: reading the status failed: %s",
                    cudaGetErrorString(err));
  if (status.magic != kCheckMagic || status.first.rule == kCheckClear) return PA_SUCCESS;
  char violation[768];
  violation_message(status.first, violation, sizeof violation);
  char text[1024];
  snprintf(text, sizeof text,
           "%s (the first violation; %llu of %llu checked pa_execute calls since the last "
           "pa_plan_check_status violated the contract)",
           violation, (unsigned long long)status.violating_calls,
           (unsigned long long)status.checked_calls);
  if (message && size > 0) snprintf(message, size, "%s", text);
  return pa__fail(PA_ERROR_CONTRACT_VIOLATION, "%s", text);
}

extern "C" void pa__check_destroy(pa_plan *plan) {
  free(plan->check_state);
  plan->check_state = nullptr;
}
