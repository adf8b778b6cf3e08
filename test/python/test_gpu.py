"""The binding on CUDA tensors: every backend against the reference executor (the binding on host
copies of the same inputs), CUDA-graph capture and replay of a decode loop whose lengths grow on
the device, the device contract checker (contract_check, check_status), and cupy arrays when cupy
is installed. Exits 77 (meson: skipped) without CUDA torch.
"""
import dataclasses
import sys
import unittest

import numpy as np

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    print("no CUDA-enabled torch: skipped")
    sys.exit(77)

import cases
import checks
import pagedattn
from test_binding import NAMED, assert_poisoned_rows, poison_query, random_config

SEED = cases.seed_from_env(None)
Config = cases.Config
GPU_BACKENDS = ("auto", "decode", "prefill", "unfused", "latent")


def host_arrays_missing(cfg):
    """Host bfloat16 / float8 arrays (the oracle's inputs) need ml_dtypes; without it those cases
    are skipped and the rest still run."""
    needs = cfg.dtype == "bfloat16" or cfg.cache_dtype == "float8e4m3fn"
    return needs and cases.ml_dtypes is None


def on_device(inputs):
    """CUDA copies of the inputs (attention_metadata stays host values)."""
    return {k: v if v is None or k == "attention_metadata" else cases.to_torch(v, "cuda")
            for k, v in inputs.items()}


def reference(inputs, attrs, **extra):
    """The library's reference executor on host copies: (result, caches after the write)."""
    work = dict(inputs)
    for name in ("key_cache", "value_cache"):
        if work[name] is not None:
            work[name] = work[name].copy()
    return pagedattn.paged_attention(*cases.positional(work), **attrs, **extra), work


class BackendsAgainstReference(unittest.TestCase):

    def compare(self, cfg, inputs, attrs, backend, seed):
        expected, expected_work = reference(inputs, attrs)
        device_inputs = on_device(inputs)
        try:
            result = pagedattn.paged_attention(*cases.positional(device_inputs), **attrs,
                                               backend=backend)
        except pagedattn.Error as e:
            if backend != "auto" and e.status_name == "PA_ERROR_NOT_SUPPORTED":
                return False
            raise
        torch.cuda.synchronize()
        out, qk = result if cfg.qk_output else (result, None)
        exp_out, exp_qk = expected if cfg.qk_output else (expected, None)
        what = "backend %s, %s" % (backend, cfg)
        tol = checks.output_tolerance(cfg)
        checks.assert_close(self, cases.to_numpy(out, exp_out), checks.as_f64(exp_out), tol,
                            "output of " + what, seed)
        for name in ("key_cache", "value_cache"):
            if inputs[name] is not None:
                checks.assert_cache(self, cases.to_numpy(device_inputs[name], inputs[name]),
                                    expected_work[name], inputs[name], cfg,
                                    name + " of " + what, seed)
        if qk is not None:
            checks.assert_output_qk(self, checks.as_f64(qk), checks.as_f64(exp_qk),
                                    cfg.qk_output, tol, "output_qk of " + what, seed)
        return True

    def run_config(self, cfg, seed):
        if host_arrays_missing(cfg):
            self.skipTest("ml_dtypes is not installed (bfloat16 / float8 host arrays)")
        inputs, attrs = cases.make_case(cfg, np.random.default_rng(seed))
        served = []
        for backend in GPU_BACKENDS:  # every backend reports, even after another one failed
            with self.subTest(backend=backend):
                if self.compare(cfg, inputs, attrs, backend, seed):
                    served.append(backend)
        self.assertIn("auto", served)

    def test_random_configurations(self):
        rng = np.random.default_rng(SEED)
        for i in range(60):
            cfg = random_config(rng)
            with self.subTest(i=i, seed=SEED + i):
                self.run_config(cfg, SEED + i)

    def test_metadata_absent_tight_loose_identical(self):
        cfg = NAMED["separate_fp16"]
        inputs, attrs = cases.make_case(cfg, np.random.default_rng(SEED))
        q_lens = np.diff(inputs["cumulative_sequence_length"])
        tight = (int(q_lens.max()), int((inputs["past_seqlens"] + q_lens).max()))
        outputs = []
        for metadata in (None, tight, (10 ** 6, 10 ** 6)):
            device_inputs = on_device(dict(inputs, attention_metadata=metadata))
            outputs.append(pagedattn.paged_attention(*cases.positional(device_inputs), **attrs))
        for other in outputs[1:]:
            self.assertTrue(torch.equal(outputs[0], other))


class NonFiniteQuery(unittest.TestCase):
    """doc/semantics.md: a NaN or Inf in the query makes that (token, head) output NaN, on every
    backend as on the reference. An int8 cache too: its kernels take Q in fp16, scaled by a power
    of two per row or per block of rows, which a NaN or Inf must not change for the other rows;
    head size 128 puts PREFILL on its wgmma kernel on Hopper. LATENT at 576 / 512 channels: 16
    heads of two tokens per sequence take its 64-row wgmma kernel on Hopper, 8 heads its narrow
    one, the int8 cache its mma.sync kernel."""

    CONFIGS = {"fp16": NAMED["separate_fp16"],
               "int8 d128": dataclasses.replace(NAMED["int8_per_channel"], head_size=128)}
    LATENT = Config(num_heads=16, kv_num_heads=1, head_size=576, v_head_size=512, mode="LATENT",
                    scale=0.05)
    LATENT_CONFIGS = {"latent 16 heads": LATENT,
                      "latent 8 heads bf16": dataclasses.replace(LATENT, num_heads=8,
                                                                 dtype="bfloat16"),
                      "latent int8": NAMED["latent_576_int8"]}

    def outputs(self, backend, cfg, past_lens):
        """(clean output, poisoned output, poisoned rows, output head size) of `backend`,
        float32."""
        cfg = dataclasses.replace(cfg, q_lens=(3, 1, 1, 2), past_lens=past_lens)
        inputs, attrs = cases.make_case(cfg, np.random.default_rng(SEED))
        poisoned_inputs, rows = poison_query(inputs, cfg)
        outputs = []
        for case in (inputs, poisoned_inputs):
            device_inputs = on_device(case)
            try:
                out = pagedattn.paged_attention(*cases.positional(device_inputs), **attrs,
                                                backend=backend)
            except pagedattn.Error as e:
                if e.status_name != "PA_ERROR_NOT_SUPPORTED":
                    raise
                self.skipTest("%s does not serve this case: %s" % (backend, e.message))
            outputs.append(out.float().cpu().numpy())
        width = cfg.v_head_size if cfg.mode == "LATENT" else cfg.head_size
        return outputs[0], outputs[1], rows, width

    def check(self, backend, configs=CONFIGS):
        # short contexts (one split), then long ones (several splits and a merge: DECODE,
        # PREFILL and LATENT keep a NaN partial there, partial_has_keys)
        for name, cfg in configs.items():
            for past_lens in ((5, 7, 0, 20), (3000, 2500, 4000, 100)):
                with self.subTest(backend=backend, cache=name, past_lens=past_lens):
                    clean, poisoned, rows, width = self.outputs(backend, cfg, past_lens)
                    assert_poisoned_rows(self, clean, poisoned, rows, width,
                                         "%s, %s, past %s (seed %d)" % (backend, name, past_lens,
                                                                        SEED))

    def test_unfused(self):
        self.check("unfused")

    def test_prefill(self):
        self.check("prefill")

    def test_decode(self):
        self.check("decode")

    def test_latent(self):
        self.check("latent", self.LATENT_CONFIGS)


def _named_test(cfg):
    def test(self):
        self.run_config(cfg, SEED)
    return test


for _name, _cfg in NAMED.items():
    setattr(BackendsAgainstReference, "test_" + _name, _named_test(_cfg))


class GraphReplay(unittest.TestCase):
    """One captured call replayed for several decode steps: the lengths grow in device memory only,
    and every step must match the reference run on that step's inputs."""

    def decode_loop(self, cfg, steps, seed):
        if host_arrays_missing(cfg):
            self.skipTest("ml_dtypes is not installed (bfloat16 / float8 host arrays)")
        rng = np.random.default_rng(seed)
        cfg = dataclasses.replace(cfg, q_lens=(1,) * len(cfg.past_lens), reserve_tokens=steps)
        inputs, attrs = cases.make_case(cfg, rng)
        host = dict(inputs)
        dev = on_device(inputs)
        max_kv = int(inputs["past_seqlens"].max()) + steps + 1
        metadata = (1, max_kv)
        dev["attention_metadata"] = host["attention_metadata"] = metadata
        initial_caches = {n: dev[n].clone() for n in ("key_cache", "value_cache")
                          if dev[n] is not None}

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: plans and lazy setup happen outside the capture
            pagedattn.paged_attention(*cases.positional(dev), **attrs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = pagedattn.paged_attention(*cases.positional(dev), **attrs)
        for name, saved in initial_caches.items():
            dev[name].copy_(saved)

        past = inputs["past_seqlens"].copy()
        for step in range(steps):
            for name in ("query", "key", "value"):
                if host[name] is not None:
                    host[name] = cases._normal(rng, host[name].shape, host[name].dtype)
                    dev[name].copy_(cases.to_torch(host[name], "cuda"))
            host["past_seqlens"] = past.copy()
            dev["past_seqlens"].copy_(cases.to_torch(past, "cuda"))
            graph.replay()
            expected, expected_work = reference(host, attrs)
            torch.cuda.synchronize()
            exp_out = expected[0] if cfg.qk_output else expected
            out = captured[0] if cfg.qk_output else captured
            what = "graph replay step %d of %s" % (step, cfg)
            checks.assert_close(self, cases.to_numpy(out, exp_out), checks.as_f64(exp_out),
                                checks.output_tolerance(cfg), "output of " + what, seed)
            for name in initial_caches:
                checks.assert_cache(self, cases.to_numpy(dev[name], host[name]),
                                    expected_work[name], host[name], cfg, name + " of " + what,
                                    seed)
                host[name] = expected_work[name]
            past = past + 1

    def test_decode_loop_fp16(self):
        self.decode_loop(Config(num_heads=8, kv_num_heads=2, past_lens=(3, 17, 0, 40)), 8, SEED)

    def test_decode_loop_bf16_int8_rotary_window(self):
        cfg = Config(num_heads=16, kv_num_heads=2, head_size=128, dtype="bfloat16",
                     cache_dtype="int8", quant="PER_CHANNEL", rotary="plain", window=9,
                     past_lens=(5, 30, 1))
        self.decode_loop(cfg, 10, SEED)

    def test_decode_loop_latent(self):
        cfg = Config(num_heads=16, kv_num_heads=1, head_size=576, v_head_size=512, mode="LATENT",
                     rotary="plain", rotary_offset=512, rotary_dim=64, scale=0.05,
                     past_lens=(12, 64))
        self.decode_loop(cfg, 6, SEED)

    def test_decode_loop_packed_sink_fp8(self):
        cfg = Config(num_heads=8, kv_num_heads=1, mode="PACKED", head_sink=True,
                     cache_dtype="float8e4m3fn", quant="PER_TENSOR", past_lens=(7, 0, 33))
        self.decode_loop(cfg, 6, SEED)


try:
    import cupy
except ImportError:
    cupy = None


@unittest.skipUnless(cupy is not None, "cupy is not installed")
class ContractCheck(unittest.TestCase):
    """contract_check=True: a clean call reports None; a block id out of range is named, and
    reading clears it; the status survives the workspace growing for a larger plan."""

    def decode_step(self, batch, blocks_per_seq, bad_entry=None):
        g = torch.Generator().manual_seed(SEED)
        heads, kv_heads, head_size, block = 4, 2, 64, 16
        num_blocks = batch * blocks_per_seq
        table = torch.arange(num_blocks, dtype=torch.int32).reshape(batch, blocks_per_seq)
        if bad_entry is not None:
            table[bad_entry] = num_blocks + 5
        past = torch.full((batch,), blocks_per_seq * block - 1, dtype=torch.int32)
        tensors = [torch.randn(batch, heads * head_size, generator=g).half(),
                   torch.randn(batch, kv_heads * head_size, generator=g).half(),
                   torch.randn(batch, kv_heads * head_size, generator=g).half(),
                   torch.randn(num_blocks, block, kv_heads, head_size, generator=g).half(),
                   torch.randn(num_blocks, block, kv_heads, head_size, generator=g).half(),
                   torch.arange(batch + 1, dtype=torch.int32), past, table]
        pagedattn.paged_attention(*[t.cuda() for t in tensors], num_heads=heads,
                                  kv_num_heads=kv_heads, contract_check=True)

    def test_check_status(self):
        self.decode_step(3, 4)
        self.assertIsNone(pagedattn.check_status())
        self.decode_step(3, 4, bad_entry=(1, 2))
        message = pagedattn.check_status()
        self.assertIsNotNone(message)
        self.assertIn("block_table[1][2]", message)
        self.assertIn("got 17", message)
        self.assertIsNone(pagedattn.check_status(), "reading must clear the status")

    def test_status_survives_a_larger_workspace(self):
        self.decode_step(2, 2, bad_entry=(0, 1))
        workspace = pagedattn._checked_workspaces[("torch", torch.cuda.current_device())]
        self.decode_step(16, 64)
        grown = pagedattn._checked_workspaces[("torch", torch.cuda.current_device())]
        self.assertGreater(grown.nbytes, workspace.nbytes)
        message = pagedattn.check_status()
        self.assertIsNotNone(message)
        self.assertIn("block_table[0][1]", message)


class CupyArrays(unittest.TestCase):
    def test_cupy_matches_reference(self):
        for cfg in (NAMED["separate_fp16"], NAMED["int8_per_channel"], NAMED["rotary_plain"]):
            inputs, attrs = cases.make_case(cfg, np.random.default_rng(SEED))
            expected, expected_work = reference(inputs, attrs)
            dev = {k: None if v is None else cupy.asarray(v) for k, v in inputs.items()}
            out = pagedattn.paged_attention(*cases.positional(dev), **attrs)
            cupy.cuda.get_current_stream().synchronize()
            checks.assert_close(self, cupy.asnumpy(out), checks.as_f64(expected),
                                checks.output_tolerance(cfg), "cupy output of %s" % (cfg,), SEED)
            checks.assert_cache(self, cupy.asnumpy(dev["key_cache"]), expected_work["key_cache"],
                                inputs["key_cache"], cfg, "cupy key_cache", SEED)


if __name__ == "__main__":
    print("seed %d (PAGEDATTN_TEST_SEED=%d repeats this run)" % (SEED, SEED))
    unittest.main(verbosity=1)
