// Pieces every launcher shares: the only cuda/ code besides the launchers that sees the planning
// types (lib/problem.h). Kernel headers and cuda/common/ never include this.
#pragma once

#include "common/paged_kv.cuh"
#include "problem.h"

namespace pa {
namespace detail {

// The cache geometry of a problem, as the kernels take it; computed once per plan.
inline paged_kv_layout paged_kv_layout_of(const pa__problem &p) {
  paged_kv_layout kv;
  kv.num_blocks = p.num_blocks;
  kv.block_size = p.block_size;
  kv.block_shift = 0;
  while ((1 << kv.block_shift) < p.block_size) kv.block_shift++;
  kv.max_blocks_per_seq = p.max_blocks_per_seq;
  kv.kv_num_heads = p.kv_num_heads;
  kv.head_size = p.head_size;
  return kv;
}

}  // namespace detail
}  // namespace pa
