"""pagedattn.torch: the operator registered with torch.library.

On CPU tensors (the reference executor): torch.library.opcheck (schema and declared cache writes,
fake kernel against the real output, AOT dispatch with dynamic shapes), torch.compile(fullgraph=True)
against eager, output_qk through a preallocated tensor. On a GPU: a decode loop compiled with
torch.compile(fullgraph=True) against the same loop run eagerly, step by step, outputs and caches;
the compiled step captured in torch.cuda.graph; and a decode module compiled with
mode="reduce-overhead" (inductor's own CUDA graphs, the caches in module buffers), which must not
skip its CUDA graphs.
Exits 77 (meson: skipped) without torch; the GPU tests are skipped without CUDA.
"""
import os
import sys
import unittest

try:
    import torch
except ImportError:
    torch = None
if torch is None:
    print("torch is not installed: skipped")
    sys.exit(77)

import pagedattn
import pagedattn.torch  # noqa: F401  (registers torch.ops.pagedattn.paged_attention)

SEED = int(os.environ.get("PAGEDATTN_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
OP = pagedattn.torch.paged_attention  # the op with the binding's defaults
REGISTERED = torch.ops.pagedattn.paged_attention  # all 20 tensor arguments positional
ABSENT = (None,) * 12  # cos_cache .. output_qk
H, HK, D, BLOCK, BLOCKS_PER_SEQ = 8, 2, 64, 16, 4


def decode_state(device, batch=3, dtype=torch.float16, seed=SEED):
    """Caches filled with random history, a shuffled block table and past lengths."""
    g = torch.Generator().manual_seed(seed)
    num_blocks = batch * BLOCKS_PER_SEQ + 2
    k_cache = torch.randn(num_blocks, BLOCK, HK, D, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, BLOCK, HK, D, generator=g).to(dtype)
    block_table = torch.randperm(num_blocks, generator=g)[:batch * BLOCKS_PER_SEQ]
    block_table = block_table.reshape(batch, BLOCKS_PER_SEQ).to(torch.int32)
    past = torch.tensor([5, 17, 0, 30, 2][:batch], dtype=torch.int32)
    return {k: v.to(device) for k, v in dict(k_cache=k_cache, v_cache=v_cache,
                                              block_table=block_table, past=past).items()}


def step_inputs(device, batch, step, dtype=torch.float16, seed=SEED):
    """One decode step's new token per sequence."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    q = torch.randn(batch, H * D, generator=g).to(dtype)
    k = torch.randn(batch, HK * D, generator=g).to(dtype)
    v = torch.randn(batch, HK * D, generator=g).to(dtype)
    cu = torch.arange(batch + 1, dtype=torch.int32)
    return [t.to(device) for t in (q, k, v, cu)]


def attention(q, k, v, k_cache, v_cache, cu, past, block_table):
    return OP(q, k, v, k_cache, v_cache, cu, past, block_table, num_heads=H, kv_num_heads=HK)


def run_loop(fn, device, steps, batch=3):
    """Runs `fn` for `steps` decode steps on a fresh state; returns the outputs and the caches."""
    state = decode_state(device, batch)
    outputs = []
    past = state["past"]
    for step in range(steps):
        q, k, v, cu = step_inputs(device, batch, step)
        outputs.append(fn(q, k, v, state["k_cache"], state["v_cache"], cu, past,
                          state["block_table"]).clone())
        past = past + 1
    return outputs, state["k_cache"], state["v_cache"]


class Registration(unittest.TestCase):
    def test_schema_declares_the_cache_writes(self):
        schema = str(REGISTERED.default._schema)
        for name in ("key_cache", "value_cache", "output_qk"):
            self.assertRegex(schema, r"Tensor\(a\d+!\)\?? %s" % name, schema)
        self.assertRegex(schema, r"Tensor query", schema)
        self.assertNotRegex(schema, r"Tensor\(a\d+!\)\?? query", schema)

    def test_opcheck(self):
        state = decode_state("cpu")
        q, k, v, cu = step_inputs("cpu", 3, 0)
        args = (q, k, v, state["k_cache"], state["v_cache"], cu, state["past"],
                state["block_table"])
        torch.library.opcheck(REGISTERED.default, args + ABSENT, dict(num_heads=H, kv_num_heads=HK))
        with_metadata = args + ABSENT[:8] + ([1, 64],) + ABSENT[9:]
        torch.library.opcheck(REGISTERED.default, with_metadata, dict(num_heads=H, kv_num_heads=HK))

    def test_fake_kernel_shape_packed_and_latent(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            packed = torch.empty(5, (H + 2 * HK) * D, dtype=torch.bfloat16)
            cache = torch.empty(4, BLOCK, HK, D, dtype=torch.bfloat16)
            ints = torch.empty(2, dtype=torch.int32)
            table = torch.empty(1, 4, dtype=torch.int32)
            out = OP(packed, None, None, cache, cache, ints, ints[:1], table, num_heads=H,
                     kv_num_heads=HK)
            self.assertEqual((tuple(out.shape), out.dtype), ((5, H * D), torch.bfloat16))
            latent_q = torch.empty(5, H * 96, dtype=torch.float16)
            latent_cache = torch.empty(4, BLOCK, 1, 96, dtype=torch.float16)
            out = OP(latent_q, torch.empty(5, 96, dtype=torch.float16), None, latent_cache, None,
                     ints, ints[:1], table, num_heads=H, kv_num_heads=1, v_head_size=64,
                     scale=0.1, kv_cache_layout="LATENT")
            self.assertEqual(tuple(out.shape), (5, H * 64))

    def test_compile_fullgraph_matches_eager_on_cpu(self):
        eager = run_loop(attention, "cpu", steps=4)
        torch._dynamo.reset()
        compiled = run_loop(torch.compile(attention, fullgraph=True, backend="aot_eager"), "cpu",
                            steps=4)
        for step, (a, b) in enumerate(zip(eager[0], compiled[0])):
            torch.testing.assert_close(b, a, rtol=0, atol=0, msg="step %d (seed %d)" % (step, SEED))
        torch.testing.assert_close(compiled[1], eager[1], rtol=0, atol=0)
        torch.testing.assert_close(compiled[2], eager[2], rtol=0, atol=0)

    def test_output_qk_preallocated(self):
        state = decode_state("cpu")
        q, k, v, cu = step_inputs("cpu", 3, 0)
        capacity = BLOCKS_PER_SEQ * BLOCK
        qk = torch.full((H, 3, capacity), 7.0)
        args = [q, k, v, state["k_cache"].clone(), state["v_cache"].clone(), cu, state["past"],
                state["block_table"]]
        out = OP(*args, num_heads=H, kv_num_heads=HK, qk_output=1, output_qk=qk)
        args[3:5] = state["k_cache"].clone(), state["v_cache"].clone()
        expected, expected_qk = pagedattn.paged_attention(*args, num_heads=H, kv_num_heads=HK,
                                                          qk_output=1)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        torch.testing.assert_close(qk, expected_qk, rtol=0, atol=0)
        with self.assertRaises(pagedattn.Error) as ctx:
            OP(*args, num_heads=H, kv_num_heads=HK, qk_output=1)
        self.assertIn("output_qk: expected a preallocated tensor", ctx.exception.message)


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
class CompiledDecodeLoopOnGpu(unittest.TestCase):
    def test_compiled_decode_loop_matches_eager(self):
        steps = 8
        eager = run_loop(attention, "cuda", steps)
        torch._dynamo.reset()
        compiled_fn = torch.compile(attention, fullgraph=True)
        compiled = run_loop(compiled_fn, "cuda", steps)
        for step, (a, b) in enumerate(zip(eager[0], compiled[0])):
            torch.testing.assert_close(b, a, rtol=5e-3, atol=5e-3,
                                       msg="step %d (seed %d)" % (step, SEED))
        torch.testing.assert_close(compiled[1], eager[1], rtol=0, atol=0)
        torch.testing.assert_close(compiled[2], eager[2], rtol=0, atol=0)
        self.assertFalse(torch.equal(decode_state("cuda")["k_cache"], eager[1]),
                         "the loop wrote no cache")

    def test_compiled_step_in_a_cuda_graph(self):
        """torch.compile's output captured in torch.cuda.graph and replayed while past grows."""
        state = decode_state("cuda")
        compiled_fn = torch.compile(attention, fullgraph=True)
        q, k, v, cu = step_inputs("cuda", 3, 0)
        past = state["past"].clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: compile outside the capture
            compiled_fn(q, k, v, state["k_cache"].clone(), state["v_cache"].clone(), cu, past,
                        state["block_table"])
        torch.cuda.current_stream().wait_stream(stream)
        k_cache, v_cache = state["k_cache"].clone(), state["v_cache"].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compiled_fn(q, k, v, k_cache, v_cache, cu, past, state["block_table"])
        ref_k, ref_v = state["k_cache"].clone(), state["v_cache"].clone()
        for step in range(4):
            new = step_inputs("cuda", 3, step + 1)
            for static, value in zip((q, k, v, cu), new):
                static.copy_(value)
            graph.replay()
            new_q, new_k, new_v, new_cu = new
            expected = attention(new_q, new_k, new_v, ref_k, ref_v, new_cu, past.clone(),
                                 state["block_table"])
            torch.testing.assert_close(out, expected, rtol=5e-3, atol=5e-3,
                                       msg="replay %d (seed %d)" % (step, SEED))
            past += 1
        torch.testing.assert_close(k_cache, ref_k, rtol=0, atol=0)


class DecodeModule(torch.nn.Module):
    """One decode step whose caches and block table are module buffers, marked static: inductor's
    CUDA graphs (mode="reduce-overhead") take a function that writes into static inputs only."""

    def __init__(self, state):
        super().__init__()
        for name in ("k_cache", "v_cache", "block_table"):
            self.register_buffer(name, state[name].clone())
            torch._dynamo.mark_static_address(getattr(self, name))

    def forward(self, q, k, v, cu, past):
        return OP(q, k, v, self.k_cache, self.v_cache, cu, past, self.block_table, num_heads=H,
                  kv_num_heads=HK)


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
class ReduceOverheadOnGpu(unittest.TestCase):
    def test_reduce_overhead_decode_loop_matches_eager(self):
        from torch._dynamo.utils import counters
        steps = 10
        state = decode_state("cuda")
        eager, module = DecodeModule(state), DecodeModule(state)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
        past = state["past"].clone()
        for step in range(steps):
            q, k, v, cu = step_inputs("cuda", 3, step)
            expected = eager(q, k, v, cu, past)
            out = compiled(q, k, v, cu, past).clone()  # a replay's output is overwritten next step
            torch.testing.assert_close(out, expected, rtol=5e-3, atol=5e-3,
                                       msg="step %d (seed %d)" % (step, SEED))
            past = past + 1
        torch.testing.assert_close(module.k_cache, eager.k_cache, rtol=0, atol=0)
        torch.testing.assert_close(module.v_cache, eager.v_cache, rtol=0, atol=0)
        self.assertFalse(torch.equal(state["k_cache"], eager.k_cache), "the loop wrote no cache")
        skips = counters["inductor"].get("cudagraph_skips", 0)
        self.assertEqual(skips, 0, "inductor skipped its CUDA graphs: %s" % dict(counters["inductor"]))
        print("reduce-overhead: %d steps, inductor counters %s" % (steps, dict(counters["inductor"])))


if __name__ == "__main__":
    print("seed %d (PAGEDATTN_TEST_SEED=%d repeats this run)" % (SEED, SEED))
    unittest.main(verbosity=1)
