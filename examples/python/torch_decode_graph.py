"""A CUDA-graph decode loop on torch tensors: one paged_attention call is captured once and
replayed; each replay appends one token per sequence, the lengths growing in device memory.

    PYTHONPATH=python python3 examples/python/torch_decode_graph.py
(after `pip install .`, without PYTHONPATH)
Exits 77 (a skipped test, for meson) where torch has no CUDA device.
"""
import sys

try:
    import torch
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("no CUDA device: skipped")
    sys.exit(77)

import pagedattn

num_heads, kv_num_heads, head_size, block_size = 32, 8, 128, 16
batch, blocks_per_seq, steps = 4, 8, 20
dev = torch.device("cuda")
f16 = dict(dtype=torch.float16, device=dev)
i32 = dict(dtype=torch.int32, device=dev)

num_blocks = batch * blocks_per_seq
key_cache = torch.randn(num_blocks, block_size, kv_num_heads, head_size, **f16)
value_cache = torch.randn_like(key_cache)
block_table = torch.randperm(num_blocks, device=dev).to(torch.int32).view(batch, blocks_per_seq)
cu_seqlens = torch.arange(batch + 1, **i32)                  # one new token per sequence
past_seqlens = torch.tensor([10, 0, 37, 5], **i32)           # tokens already cached
query = torch.randn(batch, num_heads * head_size, **f16)
key = torch.randn(batch, kv_num_heads * head_size, **f16)
value = torch.randn(batch, kv_num_heads * head_size, **f16)
# replay-wide bounds: one query token, at most blocks_per_seq * block_size keys
metadata = (1, blocks_per_seq * block_size)


def decode_step():
    out = pagedattn.paged_attention(query, key, value, key_cache, value_cache, cu_seqlens,
                                    past_seqlens, block_table, attention_metadata=metadata,
                                    num_heads=num_heads, kv_num_heads=kv_num_heads)
    past_seqlens.add_(1)  # the next replay sees one more cached token, on the device
    return out


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up outside the capture (plans, lazy kernel setup)
    decode_step()
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    output = decode_step()

for _ in range(steps):
    for new_token in (query, key, value):  # the model's next token, written in place
        new_token.normal_()
    graph.replay()
torch.cuda.synchronize()
finite = bool(torch.isfinite(output).all())
print("cached lengths after %d replays:" % steps, past_seqlens.tolist(),
      "output", tuple(output.shape), "finite:", finite)
sys.exit(0 if finite else 1)
