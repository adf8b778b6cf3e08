"""One prefill step and one decode step of paged attention on numpy arrays.

Host arrays run the library's reference executor (plain C), so this needs no GPU:
    PYTHONPATH=python python3 examples/python/numpy_reference_step.py
(after `pip install .`, without PYTHONPATH)
"""
import numpy as np

import pagedattn

num_heads, kv_num_heads, head_size, block_size = 8, 2, 64, 16
num_blocks, blocks_per_seq = 16, 4
rng = np.random.default_rng(0)

key_cache = np.zeros((num_blocks, block_size, kv_num_heads, head_size), np.float16)
value_cache = np.zeros_like(key_cache)
# two sequences, each owning four (non-contiguous) pages of the shared cache
block_table = np.array([[3, 7, 1, 12], [0, 9, 4, 15]], np.int32)
past_seqlens = np.array([0, 0], np.int32)


def step(q_lens):
    """Append q_lens[b] new tokens to each sequence and attend over everything it holds."""
    global past_seqlens
    tokens = int(sum(q_lens))
    cu_seqlens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    query = rng.standard_normal((tokens, num_heads * head_size)).astype(np.float16)
    key = rng.standard_normal((tokens, kv_num_heads * head_size)).astype(np.float16)
    value = rng.standard_normal((tokens, kv_num_heads * head_size)).astype(np.float16)
    output = pagedattn.paged_attention(
        query, key, value, key_cache, value_cache, cu_seqlens, past_seqlens, block_table,
        num_heads=num_heads, kv_num_heads=kv_num_heads, softcap=30.0)
    past_seqlens = past_seqlens + np.asarray(q_lens, np.int32)
    return output


prefill = step([5, 3])      # prompts of 5 and 3 tokens
decode = step([1, 1])       # one new token each
print("prefill output", prefill.shape, prefill.dtype, "decode output", decode.shape)
print("tokens cached per sequence:", past_seqlens.tolist())
print("first key row of sequence 1 (block 0, row 0):", key_cache[0, 0, 0, :4])
