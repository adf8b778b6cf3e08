// The schedule kernel of the row-block kernels (PREFILL, LATENT), launched by their launchers before
// the attention kernel (static: each launcher's translation unit has its own copy); not launched
// where the LATENT Hopper kernels take every unit by their CTA's index (prefill_params::
// units_by_index).
#pragma once

#include "../common/block_scan.cuh"
#include "prefill_kernel.cuh"

namespace pa {
namespace detail {

// Lists each sequence's work units (row blocks x splits) as an exclusive prefix sum over the
// sequences, from the device-side lengths; zeroes the output rows of tokens past the last
// sequence (no unit covers them) and marks them unsplit for the merge. One CTA, beside the write
// kernel (see schedule_beside_write_kernel), so its reads come before its wait: through L2, as the
// LATENT Hopper producers' search for their first unit (hopper_work_before_wait), which must count
// the units as this kernel does.
static __global__ void __launch_bounds__(kPrefillScheduleThreads)
    prefill_schedule_kernel(const prefill_params P, int out_row_elems, int t_bytes) {
  schedule_beside_write_kernel scope;
  __shared__ int32_t warp_totals[kPrefillScheduleThreads / 32];
  int32_t carry = 0;
  for (int32_t chunk = 0; chunk < P.batch_size; chunk += kPrefillScheduleThreads) {
    const int32_t b = chunk + (int32_t)threadIdx.x;
    int32_t units = 0;
    if (b < P.batch_size)
      units = prefill_sequence_work_of(
                  P, load_sequence_span<true>(P.cu_seqlens, P.past_seqlens, b))
                  .units();
    const int32_t first = block_exclusive_scan<kPrefillScheduleThreads>(units, warp_totals, carry);
    if (b < P.batch_size) P.unit_begin[b] = first;
  }
  if (threadIdx.x == 0) {
    P.unit_begin[P.batch_size] = carry;
    *P.work_counter = 0;
  }
  zero_rows_of_no_sequence<true>(P, out_row_elems, t_bytes, threadIdx.x,
                                 kPrefillScheduleThreads);
}

}  // namespace detail
}  // namespace pa
