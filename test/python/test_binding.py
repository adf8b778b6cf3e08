"""The ctypes binding on host arrays (the library's reference executor) against the independent
numpy reference (numpy_reference.py), on seeded random inputs. PAGEDATTN_TEST_SEED=<n> repeats a run.
"""
import dataclasses
import unittest

import numpy as np

import cases
import checks
import pagedattn

SEED = cases.seed_from_env(None)
Config = cases.Config


def run_binding(inputs, attrs, **extra):
    """Calls the binding on copies of the caches; returns (result, the inputs it ran on)."""
    work = dict(inputs)
    for name in ("key_cache", "value_cache"):
        if work[name] is not None:
            cache = work[name]
            work[name] = cache.clone() if hasattr(cache, "clone") else cache.copy()  # torch / numpy
    return pagedattn.paged_attention(*cases.positional(work), **attrs, **extra), work


def random_config(rng):
    """A random combination of the operator's features, within the validation rules."""
    mode = rng.choice(["SEPARATE", "SEPARATE", "PACKED", "LATENT"])
    latent = mode == "LATENT"
    kv_heads = 1 if latent else int(rng.choice([1, 2]))
    group = int(rng.choice([1, 2, 3, 4, 8]))
    head_size = int(rng.choice([96, 128])) if latent else int(rng.choice([32, 64, 80, 128]))
    batch = int(rng.integers(1, 5))
    q_lens = tuple(int(x) for x in rng.integers(0, 6, size=batch))
    past = tuple(int(x) for x in rng.integers(0, 40, size=batch))
    cfg = Config(num_heads=kv_heads * group, kv_num_heads=kv_heads, head_size=head_size,
                 block_size=int(rng.choice([16, 32])), q_lens=q_lens, past_lens=past,
                 dtype=str(rng.choice(["float16", "bfloat16"])), mode=str(mode),
                 spare_blocks=int(rng.integers(0, 3)))
    cache = rng.choice(["", "", "int8", "float8e4m3fn"])
    if cache:
        cfg.cache_dtype, cfg.quant = str(cache), str(rng.choice(["PER_TENSOR", "PER_CHANNEL"]))
    if latent:
        cfg.v_head_size = head_size - 32
        cfg.rotary, cfg.rotary_offset, cfg.rotary_dim = "plain", head_size - 32, 32
        cfg.scale = float(rng.uniform(0.05, 0.2))
    else:
        cfg.rotary = str(rng.choice(["none", "plain", "interleaved"]))
        if cfg.rotary != "none":
            cfg.rotary_offset = int(rng.choice([0, 0, 8]))
            cfg.rotary_dim = int(rng.choice([16, head_size - cfg.rotary_offset]))
        cfg.qk_norm = bool(rng.random() < 0.3)
        cfg.head_sink = bool(rng.random() < 0.3)
    if cfg.rotary != "none" and rng.random() < 0.2:
        cfg.rotary_rows = int(rng.integers(1, 20))  # later positions pass through unrotated
    cfg.is_causal = 0 if rng.random() < 0.15 else 1
    if cfg.is_causal:
        cfg.window = int(rng.choice([-1, -1, 1, 3, 7, 1000]))
    cfg.softcap = float(rng.choice([0.0, 0.0, 2.0, 30.0]))
    if rng.random() < 0.3:
        q_cap = max(max(q_lens), 1) - int(rng.integers(0, 2))
        kv_cap = int(rng.integers(20, 80))
        cfg.bias = (int(rng.choice([1, batch])), int(rng.choice([1, cfg.num_heads])),
                    max(q_cap, 1), kv_cap)
    cfg.qk_output = int(rng.choice([0, 0, 1, 2]))
    cfg.slot_minus_one = bool(rng.random() < 0.2)
    cfg.unmapped_blocks = bool(rng.random() < 0.2)
    cfg.query_positions = bool(rng.random() < 0.2)
    return cfg


def random_large_config(rng):
    """random_config's features on the shapes the fast kernels take, which its small shapes never
    reach: long contexts (splits and their merge), LATENT at 576 / 512 channels with 16-128 heads
    (the Hopper kernels), head sizes up to 256, block sizes up to 256, prefill chunks of up to 128
    tokens. Sized so that the host reference takes well under a second: tools/sweep_random.py
    --large runs them on the GPU backends, ReferenceParity checks 6 on the host."""
    cfg = random_config(rng)
    latent = cfg.mode == "LATENT"
    decode_shaped = latent or rng.random() < 0.6
    batch = int(rng.integers(1, 5))
    if decode_shaped:
        q_lens = tuple(int(x) for x in rng.integers(1, 5 if rng.random() < 0.3 else 2, size=batch))
        past = tuple(int(x) for x in rng.integers(300, 2500, size=batch))
    else:
        q_lens = tuple(int(x) for x in rng.integers(1, 129, size=batch))
        past = tuple(int(x) for x in rng.integers(0, 1000, size=batch))
    cfg.q_lens, cfg.past_lens = q_lens, past
    cfg.block_size = int(rng.choice([16, 32, 64, 128, 256]))
    if latent:
        cfg.num_heads = int(rng.choice([16, 32, 64, 128]))
        cfg.head_size, cfg.v_head_size = 576, 512
        cfg.rotary = str(rng.choice(["plain", "interleaved"]))
        cfg.rotary_offset, cfg.rotary_dim = 512, 64
        cfg.scale = float(rng.uniform(0.03, 0.08))
    else:
        cfg.head_size = int(rng.choice([64, 128, 256] if decode_shaped else [64, 128]))
        if cfg.rotary != "none":
            cfg.rotary_dim = int(rng.choice([16, cfg.head_size - cfg.rotary_offset]))
        group = cfg.num_heads // cfg.kv_num_heads
        cfg.kv_num_heads = int(rng.choice([1, 2, 4]))
        cfg.num_heads = cfg.kv_num_heads * group
    if cfg.bias is not None:  # a bias covering the step's start only
        cfg.bias = (cfg.bias[0] if cfg.bias[0] == 1 else batch,
                    cfg.bias[1] if cfg.bias[1] == 1 else cfg.num_heads,
                    max(1, min(max(q_lens), cfg.bias[2])), cfg.bias[3])
    cfg.qk_output = 0  # its (heads, tokens, capacity) output is served by UNFUSED alone
    return cfg


# Named cases: each line is one feature of the operator the binding must carry through.
BASE = Config(num_heads=8, kv_num_heads=2, head_size=64, q_lens=(3, 0, 1, 5), past_lens=(5, 7, 0, 20))
NAMED = {
    "separate_fp16": BASE,
    "separate_bf16": dataclasses.replace(BASE, dtype="bfloat16"),
    "packed_qkv": dataclasses.replace(BASE, mode="PACKED"),
    "latent": Config(num_heads=8, kv_num_heads=1, head_size=96, v_head_size=64, mode="LATENT",
                     rotary="plain", rotary_offset=64, rotary_dim=32, scale=0.1,
                     q_lens=(2, 1, 0), past_lens=(17, 3, 9)),
    "latent_576_int8": Config(num_heads=4, kv_num_heads=1, head_size=576, v_head_size=512,
                              mode="LATENT", rotary="interleaved", rotary_offset=512,
                              rotary_dim=64, scale=0.05, cache_dtype="int8", quant="PER_CHANNEL",
                              q_lens=(1, 2), past_lens=(40, 3)),
    "int8_per_tensor": dataclasses.replace(BASE, cache_dtype="int8", quant="PER_TENSOR"),
    "int8_per_channel": dataclasses.replace(BASE, cache_dtype="int8", quant="PER_CHANNEL"),
    "fp8_per_tensor": dataclasses.replace(BASE, cache_dtype="float8e4m3fn", quant="PER_TENSOR"),
    # a sharp softmax over a bf16 query and a per-channel scale: the scale rounded into a bf16 Q
    # put PREFILL's and LATENT's mma.sync kernels past the output tolerance (about 1.2-2.6x of it
    # on every seed, by a numpy model of that rounding; 0.7x at most with Q in fp16)
    "int8_per_channel_bf16_sharp": dataclasses.replace(BASE, cache_dtype="int8",
                                                       quant="PER_CHANNEL", dtype="bfloat16",
                                                       scale=0.5),
    "latent_int8_per_channel_bf16_sharp": Config(
        num_heads=8, kv_num_heads=1, head_size=128, v_head_size=96, mode="LATENT",
        rotary="plain", rotary_offset=96, rotary_dim=32, dtype="bfloat16", cache_dtype="int8",
        quant="PER_CHANNEL", scale=0.5, q_lens=(2, 1, 3), past_lens=(5, 12, 30)),
    "fp8_per_channel_bf16": dataclasses.replace(BASE, cache_dtype="float8e4m3fn",
                                                quant="PER_CHANNEL", dtype="bfloat16"),
    "rotary_plain": dataclasses.replace(BASE, rotary="plain"),
    "rotary_interleaved": dataclasses.replace(BASE, rotary="interleaved"),
    "rotary_offset_partial": dataclasses.replace(BASE, rotary="plain", rotary_offset=16,
                                                 rotary_dim=32),
    "rotary_short_table": dataclasses.replace(BASE, rotary="interleaved", rotary_rows=6),
    "qk_norm": dataclasses.replace(BASE, qk_norm=True),
    "qk_norm_rotary_packed": dataclasses.replace(BASE, qk_norm=True, rotary="plain",
                                                 mode="PACKED"),
    "window_1": dataclasses.replace(BASE, window=1),
    "window_4": dataclasses.replace(BASE, window=4),
    "window_beyond_context": dataclasses.replace(BASE, window=100000),
    "softcap": dataclasses.replace(BASE, softcap=5.0, scale=0.5),
    "head_sink": dataclasses.replace(BASE, head_sink=True),
    "head_sink_window_1": dataclasses.replace(BASE, head_sink=True, window=1),
    "bias_full": dataclasses.replace(BASE, bias=(4, 8, 5, 64)),
    "bias_broadcast_batch": dataclasses.replace(BASE, bias=(1, 8, 5, 64)),
    "bias_broadcast_heads": dataclasses.replace(BASE, bias=(4, 1, 5, 64)),
    "bias_broadcast_both_small_capacity": dataclasses.replace(BASE, bias=(1, 1, 2, 11)),
    "output_qk_1": dataclasses.replace(BASE, qk_output=1),
    "output_qk_2": dataclasses.replace(BASE, qk_output=2),
    "output_qk_1_softcap_bias": dataclasses.replace(BASE, qk_output=1, softcap=3.0,
                                                    bias=(1, 8, 5, 64)),
    "slot_mapping_explicit": dataclasses.replace(BASE, slot_mapping=True),
    "slot_mapping_minus_one": dataclasses.replace(BASE, slot_minus_one=True),
    "unmapped_blocks": dataclasses.replace(BASE, unmapped_blocks=True),
    "query_positions": dataclasses.replace(BASE, query_positions=True, rotary="plain"),
    "not_causal": dataclasses.replace(BASE, is_causal=0),
    "decode_batch": dataclasses.replace(BASE, q_lens=(1, 1, 1, 0, 1), past_lens=(0, 1, 33, 4, 60)),
    "block_size_64": dataclasses.replace(BASE, block_size=64, past_lens=(70, 1, 130, 2)),
    "head_size_128_bf16": dataclasses.replace(BASE, head_size=128, dtype="bfloat16"),
}
for group in (1, 2, 3, 4, 8):
    NAMED["gqa_group_%d" % group] = dataclasses.replace(BASE, num_heads=2 * group, kv_num_heads=2)


class ReferenceParity(unittest.TestCase):
    """Binding (library reference executor) == numpy reference."""

    def check(self, cfg, seed, **extra):
        rng = np.random.default_rng(seed)
        inputs, attrs = cases.make_case(cfg, rng)
        expected = checks.run_reference_model(inputs, attrs)
        result, work = run_binding(inputs, attrs, **extra)
        output, output_qk = result if cfg.qk_output else (result, None)
        tol = checks.output_tolerance(cfg)
        what = "%s" % (cfg,)
        self.assertEqual(output.dtype, inputs["query"].dtype)
        checks.assert_close(self, output, expected["output"], tol, "output of " + what, seed)
        checks.assert_cache(self, work["key_cache"], expected["key_cache"], inputs["key_cache"],
                            cfg, "key_cache of " + what, seed)
        if inputs["value_cache"] is not None:
            checks.assert_cache(self, work["value_cache"], expected["value_cache"],
                                inputs["value_cache"], cfg, "value_cache of " + what, seed)
        if cfg.qk_output:
            checks.assert_output_qk(self, output_qk, expected["output_qk"], cfg.qk_output, tol,
                                    "output_qk of " + what, seed)

    def test_random_configurations(self):
        rng = np.random.default_rng(SEED)
        for i in range(300):
            cfg = random_config(rng)
            with self.subTest(i=i, seed=SEED + i):
                self.check(cfg, SEED + i)

    def test_random_large_configurations(self):
        """random_large_config's shapes are valid inputs and the two references agree on them
        (tools/sweep_random.py --large runs them on the GPU backends)."""
        rng = np.random.default_rng(SEED)
        for i in range(6):
            cfg = random_large_config(rng)
            with self.subTest(i=i, seed=SEED + i):
                self.check(cfg, SEED + i)


def _named_test(name, cfg):
    def test(self):
        self.check(cfg, SEED)
    test.__name__ = "test_" + name
    return test


for _name, _cfg in NAMED.items():
    setattr(ReferenceParity, "test_" + _name, _named_test(_name, _cfg))


def poison_query(inputs, cfg):
    """The inputs with a NaN in one channel of (token 0, head 1) and +Inf in every channel of
    (token 3, head 2) (every logit of that row is then NaN: inf times keys of both signs), and the
    (token, head) slices that must come out NaN (doc/semantics.md, non-finite inputs)."""
    query = inputs["query"].copy()
    d = cfg.head_size
    query[0, 1 * d + 5] = np.nan
    query[3, 2 * d:3 * d] = np.inf
    return dict(inputs, query=query), ((0, 1), (3, 2))


def assert_poisoned_rows(test, clean, poisoned, rows, head_size, what):
    """The poisoned (token, head) slices are all NaN; every other element is bitwise the clean
    run's."""
    clean = np.asarray(clean, np.float32).reshape(clean.shape[0], -1, head_size)
    poisoned = np.asarray(poisoned, np.float32).reshape(clean.shape)
    mask = np.zeros(clean.shape[:2], bool)
    for t, h in rows:
        mask[t, h] = True
        test.assertTrue(np.isnan(poisoned[t, h]).all(),
                        "%s: token %d head %d should be NaN, got %s" % (what, t, h, poisoned[t, h][:4]))
    np.testing.assert_array_equal(poisoned[~mask], clean[~mask], what)


class BindingBehaviour(unittest.TestCase):
    def test_check_status_without_checked_calls(self):
        """check_status() reads the contract checker of CUDA calls; before any, it says so."""
        if pagedattn._checked_workspaces:
            self.skipTest("a checked CUDA call has run in this process")
        with self.assertRaises(pagedattn.Error) as ctx:
            pagedattn.check_status()
        self.assertIn("check_status: no checked call has run", ctx.exception.message)

    def case(self, cfg=BASE):
        return cases.make_case(cfg, np.random.default_rng(SEED))

    def test_output_qk_preallocated_with_larger_capacity(self):
        cfg = dataclasses.replace(BASE, qk_output=2)
        inputs, attrs = self.case(cfg)
        capacity = inputs["block_table"].shape[1] * cfg.block_size + 7
        qk = np.full((cfg.num_heads, inputs["query"].shape[0], capacity), 123.0, np.float32)
        result, _ = run_binding(inputs, attrs, output_qk=qk)
        self.assertIs(result[1], qk)
        expected = checks.run_reference_model(inputs, dict(attrs, qk_capacity=capacity))
        checks.assert_output_qk(self, qk, expected["output_qk"], 2, 5e-3, "output_qk", SEED)

    def test_output_qk_float16(self):
        cfg = dataclasses.replace(BASE, qk_output=1)
        inputs, attrs = self.case(cfg)
        capacity = inputs["block_table"].shape[1] * cfg.block_size
        qk = np.empty((cfg.num_heads, inputs["query"].shape[0], capacity), np.float16)
        run_binding(inputs, attrs, output_qk=qk)
        expected = checks.run_reference_model(inputs, attrs)
        checks.assert_output_qk(self, qk, expected["output_qk"], 1, 5e-3, "output_qk", SEED)

    def test_metadata_absent_tight_loose_identical(self):
        inputs, attrs = self.case()
        q_lens = np.diff(inputs["cumulative_sequence_length"])
        kv = inputs["past_seqlens"] + q_lens
        runs = [run_binding(inputs, attrs)[0]]
        for metadata in ((int(q_lens.max()), int(kv.max())), (10 ** 6, 10 ** 6), (0, 0)):
            runs.append(run_binding(dict(inputs, attention_metadata=metadata), attrs)[0])
        for other in runs[1:]:
            np.testing.assert_array_equal(runs[0].view(np.uint16), other.view(np.uint16))

    def test_token_count_zero(self):
        cfg = dataclasses.replace(BASE, q_lens=(0, 0), past_lens=(3, 9))
        inputs, attrs = self.case(cfg)
        output, work = run_binding(inputs, attrs)
        self.assertEqual(output.shape, (0, cfg.num_heads * cfg.head_size))
        np.testing.assert_array_equal(work["key_cache"].view(np.uint16),
                                      inputs["key_cache"].view(np.uint16))

    def test_uint8_bytes_stand_in_for_float8(self):
        cfg = dataclasses.replace(BASE, cache_dtype="float8e4m3fn", quant="PER_CHANNEL")
        inputs, attrs = self.case(cfg)
        as_bytes = dict(inputs, key_cache=inputs["key_cache"].view(np.uint8),
                        value_cache=inputs["value_cache"].view(np.uint8))
        out_fp8, work_fp8 = run_binding(inputs, attrs)
        out_u8, work_u8 = run_binding(as_bytes, attrs)
        np.testing.assert_array_equal(out_fp8.view(np.uint16), out_u8.view(np.uint16))
        np.testing.assert_array_equal(work_fp8["key_cache"].view(np.uint8), work_u8["key_cache"])

    def test_plan_cache_reuses_and_evicts(self):
        inputs, attrs = self.case()
        pagedattn.clear_plan_cache()
        run_binding(inputs, attrs)
        run_binding(inputs, attrs)
        self.assertEqual(len(pagedattn._plans), 1)
        saved = pagedattn.PLAN_CACHE_SIZE
        pagedattn.PLAN_CACHE_SIZE = 2
        try:
            for scale in (0.1, 0.2, 0.3):
                run_binding(inputs, dict(attrs, scale=scale))
            self.assertEqual(len(pagedattn._plans), 2)
        finally:
            pagedattn.PLAN_CACHE_SIZE = saved

    def assertError(self, status_name, substring, fn):
        with self.assertRaises(pagedattn.Error) as ctx:
            fn()
        self.assertEqual(ctx.exception.status_name, status_name, str(ctx.exception))
        self.assertIn(substring, ctx.exception.message)
        self.assertIn(status_name, str(ctx.exception))

    def test_library_error_passes_status_and_message(self):
        inputs, attrs = self.case()
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "num_heads",
                         lambda: run_binding(inputs, dict(attrs, num_heads=7)))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "local_window_size",
                         lambda: run_binding(inputs, dict(attrs, local_window_size=0)))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "quant_type",
                         lambda: run_binding(inputs, dict(attrs, k_quant_type="PER_ROW")))

    def test_forced_gpu_backend_on_host_arrays_is_not_supported(self):
        inputs, attrs = self.case()
        self.assertError("PA_ERROR_NOT_SUPPORTED", "DECODE",
                         lambda: run_binding(inputs, attrs, backend="decode"))

    def test_binding_checks_name_the_argument(self):
        inputs, attrs = self.case()
        strided = np.repeat(inputs["query"], 2, axis=1)[:, ::2]
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "query",
                         lambda: run_binding(dict(inputs, query=strided), attrs))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "block_table",
                         lambda: run_binding(dict(inputs, block_table=inputs["block_table"]
                                                  .astype(np.int64)), attrs))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "head_sink",
                         lambda: run_binding(dict(inputs, head_sink=[1.0] * 8), attrs))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "backend",
                         lambda: run_binding(inputs, attrs, backend="fastest"))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "attention_metadata",
                         lambda: run_binding(dict(inputs, attention_metadata=(1, 2, 3)), attrs))

    def test_nan_or_inf_in_the_query_propagates(self):
        cfg = dataclasses.replace(BASE, q_lens=(3, 1, 1, 2))
        inputs, attrs = self.case(cfg)
        clean, clean_work = run_binding(inputs, attrs)
        poisoned_inputs, rows = poison_query(inputs, cfg)
        poisoned, work = run_binding(poisoned_inputs, attrs)
        assert_poisoned_rows(self, clean, poisoned, rows, cfg.head_size, "output")
        independent = checks.run_reference_model(poisoned_inputs, attrs)["output"]
        np.testing.assert_array_equal(np.isnan(np.asarray(independent, np.float64)),
                                      np.isnan(np.asarray(poisoned, np.float32)),
                                      "NaN positions against the numpy reference")
        for name in ("key_cache", "value_cache"):
            np.testing.assert_array_equal(work[name].view(np.uint16),
                                          clean_work[name].view(np.uint16), name)

    def test_read_only_arrays_the_call_writes_are_rejected(self):
        inputs, attrs = self.case()
        for name in ("key_cache", "value_cache"):
            frozen = inputs[name].copy()
            frozen.flags.writeable = False
            before = frozen.copy()
            self.assertError("PA_ERROR_INVALID_ARGUMENT", name + ": expected a writable array",
                             lambda: pagedattn.paged_attention(
                                 *cases.positional(dict(inputs, **{name: frozen})), **attrs))
            np.testing.assert_array_equal(frozen.view(np.uint16), before.view(np.uint16))
        # np.frombuffer over an immutable bytes object: the bytes must not change
        raw = inputs["key_cache"].tobytes()
        over_bytes = np.frombuffer(raw, inputs["key_cache"].dtype).reshape(inputs["key_cache"].shape)
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "key_cache: expected a writable array",
                         lambda: pagedattn.paged_attention(
                             *cases.positional(dict(inputs, key_cache=over_bytes)), **attrs))
        self.assertEqual(raw, inputs["key_cache"].tobytes())
        cfg = dataclasses.replace(BASE, qk_output=1)
        inputs, attrs = self.case(cfg)
        qk = np.zeros((cfg.num_heads, inputs["query"].shape[0],
                       inputs["block_table"].shape[1] * cfg.block_size), np.float32)
        qk.flags.writeable = False
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "output_qk: expected a writable array",
                         lambda: run_binding(inputs, attrs, output_qk=qk))

    def test_python_arguments_checked_before_c(self):
        """Each message names the argument, the expected value and the actual one."""
        inputs, attrs = self.case()
        for value, expected in ((2 ** 40, "num_heads: expected an integer in [-2147483648, "
                                          "2147483647] (int32), got 1099511627776"),
                                (2 ** 32 + 4, "num_heads: expected an integer in [-2147483648, "
                                              "2147483647] (int32), got 4294967300"),
                                (4.7, "num_heads: expected an integer, got 4.7 (float)"),
                                (True, "num_heads: expected an integer, got True (bool)"),
                                ("8", "num_heads: expected an integer, got '8' (str)")):
            self.assertError("PA_ERROR_INVALID_ARGUMENT", expected,
                             lambda: run_binding(inputs, dict(attrs, num_heads=value)))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "scale: expected a real number, got 'x'",
                         lambda: run_binding(inputs, dict(attrs, scale="x")))
        self.assertError("PA_ERROR_INVALID_ARGUMENT", "k_quant_type: expected a string, got 3",
                         lambda: run_binding(inputs, dict(attrs, k_quant_type=3)))
        self.assertError("PA_ERROR_INVALID_ARGUMENT",
                         "query: expected an array (numpy.ndarray, torch.Tensor or a CUDA array), "
                         "got numpy.float16",
                         lambda: run_binding(dict(inputs, query=np.float16(1.0)), attrs))
        cu64 = inputs["cumulative_sequence_length"].astype(np.int64)
        self.assertError("PA_ERROR_INVALID_ARGUMENT",
                         "cumulative_sequence_length: expected dtype int32, got int64",
                         lambda: run_binding(dict(inputs, cumulative_sequence_length=cu64), attrs))
        self.assertError("PA_ERROR_INVALID_ARGUMENT",
                         "attention_metadata: expected two host ints, got (1.5, 2)",
                         lambda: run_binding(dict(inputs, attention_metadata=(1.5, 2)), attrs))
        # numpy integers are integers: accepted, with the same result as Python ints
        expected, _ = run_binding(inputs, attrs)
        converted = dict(attrs, num_heads=np.int64(attrs["num_heads"]),
                         kv_num_heads=np.int32(attrs["kv_num_heads"]))
        np.testing.assert_array_equal(run_binding(inputs, converted)[0].view(np.uint16),
                                      expected.view(np.uint16))

    @unittest.skipUnless(cases.torch_available(), "torch is not installed")
    def test_cpu_torch_matches_numpy(self):
        import torch
        cfg = dataclasses.replace(BASE, dtype="bfloat16", cache_dtype="float8e4m3fn",
                                  quant="PER_TENSOR")
        inputs, attrs = self.case(cfg)
        out_np, work_np = run_binding(inputs, attrs)
        as_torch = {k: None if v is None else cases.to_torch(v) for k, v in inputs.items()}
        out_t, work_t = run_binding(as_torch, attrs)
        self.assertEqual(out_t.dtype, torch.bfloat16)
        np.testing.assert_array_equal(out_np.view(np.uint16),
                                      out_t.view(torch.int16).numpy().view(np.uint16))
        np.testing.assert_array_equal(work_np["key_cache"].view(np.uint8),
                                      work_t["key_cache"].view(torch.uint8).numpy())


if __name__ == "__main__":
    print("seed %d (PAGEDATTN_TEST_SEED=%d repeats this run)" % (SEED, SEED))
    unittest.main(verbosity=1)
