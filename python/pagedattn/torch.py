"""pagedattn.torch: the operator as a torch custom op, `torch.ops.pagedattn.paged_attention`.

Registered with torch.library (schema, fake kernel for tracing, in-place writes of key_cache,
value_cache and output_qk declared), so torch.compile(fullgraph=True) traces through it without a
graph break, and torch.cuda.graph captures the compiled call. `pagedattn.torch.paged_attention`
takes the arguments of pagedattn.paged_attention (doc/python.md); the op itself takes all twenty
tensor arguments positionally (None where absent). Differences that a traced graph needs: it returns the output only; with qk_output != 0 the caller passes a preallocated output_qk,
which the op fills; output_qk comes right after attention_bias (a tensor cannot be keyword-only in
a custom op's schema); no `stream` (the current stream is used). Importing this module needs
torch; `import pagedattn` does not.
"""
from typing import List, Optional

import torch

from . import _argument_error
from . import paged_attention as _paged_attention

__all__ = ["paged_attention"]


# Every tensor argument of the op is positional and required (None for an absent one): torch's
# custom-op dispatch (2.11) finds the declared writes by position among the arguments passed, so a
# defaulted output_qk would be missing there. paged_attention below supplies the defaults.
@torch.library.custom_op("pagedattn::paged_attention",
                         mutates_args=("key_cache", "value_cache", "output_qk"))
def _op(query: torch.Tensor, key: Optional[torch.Tensor], value: Optional[torch.Tensor],
        key_cache: torch.Tensor, value_cache: Optional[torch.Tensor],
        cumulative_sequence_length: torch.Tensor, past_seqlens: torch.Tensor,
        block_table: torch.Tensor, cos_cache: Optional[torch.Tensor],
        sin_cache: Optional[torch.Tensor], slot_mapping: Optional[torch.Tensor],
        head_sink: Optional[torch.Tensor], q_norm_weight: Optional[torch.Tensor],
        k_norm_weight: Optional[torch.Tensor], k_scale: Optional[torch.Tensor],
        v_scale: Optional[torch.Tensor], attention_metadata: Optional[List[int]],
        query_positions: Optional[torch.Tensor], attention_bias: Optional[torch.Tensor],
        output_qk: Optional[torch.Tensor],
        *, num_heads: int, kv_num_heads: int,
        scale: float = 0.0, softcap: float = 0.0, local_window_size: int = -1, do_rotary: int = 0,
        rotary_interleaved: int = 0, qk_norm_epsilon: float = 1e-6, k_quant_type: str = "NONE",
        v_quant_type: str = "NONE", k_cache_dtype: str = "", v_cache_dtype: str = "",
        v_head_size: int = 0, rotary_offset: int = 0, kv_cache_layout: str = "SEPARATE",
        qk_output: int = 0, is_causal: int = 1, backend: str = "auto") -> torch.Tensor:
    _check_output_qk(qk_output, output_qk)
    result = _paged_attention(
        query, key, value, key_cache, value_cache, cumulative_sequence_length, past_seqlens,
        block_table, cos_cache, sin_cache, slot_mapping, head_sink, q_norm_weight, k_norm_weight,
        k_scale, v_scale, attention_metadata, query_positions, attention_bias,
        num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale, softcap=softcap,
        local_window_size=local_window_size, do_rotary=do_rotary,
        rotary_interleaved=rotary_interleaved, qk_norm_epsilon=qk_norm_epsilon,
        k_quant_type=k_quant_type, v_quant_type=v_quant_type, k_cache_dtype=k_cache_dtype,
        v_cache_dtype=v_cache_dtype, v_head_size=v_head_size, rotary_offset=rotary_offset,
        kv_cache_layout=kv_cache_layout, qk_output=qk_output, is_causal=is_causal,
        backend=backend, output_qk=output_qk)
    return result[0] if qk_output != 0 else result


def _check_output_qk(qk_output, output_qk):
    if qk_output != 0 and output_qk is None:
        raise _argument_error("output_qk: expected a preallocated tensor when qk_output is %d "
                              "(pagedattn.torch cannot return a second tensor), got None"
                              % qk_output)


@_op.register_fake
def _(query, key, value, key_cache, value_cache, cumulative_sequence_length, past_seqlens,
      block_table, cos_cache, sin_cache, slot_mapping, head_sink, q_norm_weight, k_norm_weight,
      k_scale, v_scale, attention_metadata, query_positions, attention_bias, output_qk, *,
      num_heads, kv_num_heads, scale=0.0, softcap=0.0, local_window_size=-1, do_rotary=0,
      rotary_interleaved=0, qk_norm_epsilon=1e-6, k_quant_type="NONE", v_quant_type="NONE",
      k_cache_dtype="", v_cache_dtype="", v_head_size=0, rotary_offset=0,
      kv_cache_layout="SEPARATE", qk_output=0, is_causal=1, backend="auto"):
    """The output's shape, (token_count, num_heads * effective v_head_size), as the binding sizes
    it: head_size = query.shape[1] / num_heads, or / (num_heads + 2 * kv_num_heads) for packed
    QKV (key absent in SEPARATE)."""
    _check_output_qk(qk_output, output_qk)
    if query.dim() != 2 or num_heads <= 0 or kv_num_heads <= 0:
        raise _argument_error("query: expected rank 2 with num_heads > 0 and kv_num_heads > 0, "
                              "got rank %d, num_heads %d, kv_num_heads %d"
                              % (query.dim(), num_heads, kv_num_heads))
    packed = key is None and kv_cache_layout in ("", "SEPARATE")
    head_size = query.shape[1] // (num_heads + 2 * kv_num_heads if packed else num_heads)
    return query.new_empty((query.shape[0], num_heads * (v_head_size or head_size)))


def paged_attention(
        query, key, value, key_cache, value_cache, cumulative_sequence_length, past_seqlens,
        block_table, cos_cache=None, sin_cache=None, slot_mapping=None, head_sink=None,
        q_norm_weight=None, k_norm_weight=None, k_scale=None, v_scale=None,
        attention_metadata=None, query_positions=None, attention_bias=None, output_qk=None, *,
        num_heads, kv_num_heads, **attributes):
    """torch.ops.pagedattn.paged_attention with pagedattn.paged_attention's defaults: absent inputs
    may be left out; the attributes are keywords (doc/python.md)."""
    return torch.ops.pagedattn.paged_attention(
        query, key, value, key_cache, value_cache, cumulative_sequence_length, past_seqlens,
        block_table, cos_cache, sin_cache, slot_mapping, head_sink, q_norm_weight, k_norm_weight,
        k_scale, v_scale, attention_metadata, query_positions, attention_bias, output_qk,
        num_heads=num_heads, kv_num_heads=kv_num_heads, **attributes)
