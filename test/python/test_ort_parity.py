"""The binding (library reference executor, host arrays) against onnxruntime's CPU
com.microsoft::GroupQueryAttention, an implementation written by others.

Mapping (doc/development.md, "Oracles and tolerances"): one GQA call per sequence with new tokens; past K/V gathered
from the pages into BNSH; seqlens_k = past + new - 1; total_sequence_length = past + new. GQA's CPU
kernel has no bfloat16 and does not honor q_norm_weight, so cases are float16 and QK-Norm is applied
to GQA's Q/K beforehand (RMSNorm in float32, rounded to float16). local_window_size, softcap,
head_sink, attention_bias, qk_output, causal and int8 caches (k_scale / v_scale) map one to one.
GQA's output_qk holds 0 at masked positions where ours holds -inf (qk_output = 1): only admitted
positions are compared there.
"""
import dataclasses
import unittest

import numpy as np

import cases
import checks
import ort_gqa
import pagedattn

SEED = cases.seed_from_env(None)
Config = cases.Config
F32 = np.float32


def gather_bnsh(cache, block_table_row, length, block_size):
    """Positions [0, length) of one sequence's pages as (heads, length, D)."""
    pos = np.arange(length)
    return np.ascontiguousarray(cache[block_table_row[pos // block_size], pos % block_size]
                                .transpose(1, 0, 2))


def rms_norm_rows(x, heads, head_size, weight, eps=1e-6):
    """x (rows, heads*D) float16 -> per-head RMSNorm in float32, rounded once to float16."""
    h = x.astype(F32).reshape(x.shape[0], heads, head_size)
    inv = F32(1) / np.sqrt(np.mean(h * h, axis=-1, keepdims=True, dtype=F32) + F32(eps))
    return (h * inv * weight.astype(F32)).astype(np.float16).reshape(x.shape)


def gqa_inputs_for(cfg, inputs, rows):
    """GQA's query / key / value for the token rows of one sequence (QK-Norm applied here)."""
    H, Hk, D = cfg.num_heads, cfg.kv_num_heads, cfg.head_size
    q = inputs["query"][rows]
    k = None if inputs["key"] is None else inputs["key"][rows]
    v = None if inputs["value"] is None else inputs["value"][rows]
    if cfg.qk_norm:
        qw, kw = inputs["q_norm_weight"], inputs["k_norm_weight"]
        if cfg.mode == "PACKED":
            q = q.copy()
            q[:, :H * D] = rms_norm_rows(q[:, :H * D], H, D, qw)
            q[:, H * D:(H + Hk) * D] = rms_norm_rows(q[:, H * D:(H + Hk) * D], Hk, D, kw)
        else:
            q, k = rms_norm_rows(q, H, D, qw), rms_norm_rows(k, Hk, D, kw)
    return q, k, v


def gqa_attributes(cfg):
    attrs = dict(scale=cfg.scale or None, softcap=cfg.softcap or None,
                 local_window_size=cfg.window, do_rotary=int(cfg.rotary != "none"),
                 rotary_interleaved=int(cfg.rotary == "interleaved"),
                 qk_output=cfg.qk_output or None, causal=None if cfg.is_causal else 0)
    if cfg.cache_dtype == "int8":
        attrs.update(k_quant_type=cfg.quant, v_quant_type=cfg.quant, kv_cache_bit_width=8)
    return attrs


def gqa_scales(cfg, inputs):
    if cfg.cache_dtype != "int8":
        return None, None
    if cfg.quant == "PER_CHANNEL":  # ours (Hk, 1, D), GQA's (1, Hk, 1, D)
        return inputs["k_scale"][None], inputs["v_scale"][None]
    return inputs["k_scale"], inputs["v_scale"]


@unittest.skipUnless(ort_gqa.available(), "onnxruntime / onnx are not installed")
class GroupQueryAttentionParity(unittest.TestCase):
    """The binding's reference path against GQA."""

    def run_operator(self, inputs, attrs):
        return pagedattn.paged_attention(*cases.positional(inputs), **attrs)

    def compare_step(self, cfg, inputs, attrs, ort_past, seed, label):
        """One operator call through the binding and one GQA call per sequence; ort_past[b] holds
        GQA's own (past_key, past_value) for sequence b and is advanced to its present."""
        work = inputs  # the caches are updated in place, step after step
        result = self.run_operator(work, attrs)
        output, output_qk = result if cfg.qk_output else (result, None)
        tol = 2e-2 if cfg.cache_dtype == "int8" else 5e-3
        cu, past = inputs["cumulative_sequence_length"], inputs["past_seqlens"]
        k_scale, v_scale = gqa_scales(cfg, inputs)
        for b in range(len(past)):
            rows = np.arange(cu[b], cu[b + 1])
            if rows.size == 0:
                continue
            P, S = int(past[b]), rows.size
            q, k, v = gqa_inputs_for(cfg, inputs, rows)
            bias = inputs["attention_bias"]
            if bias is not None:
                bias = np.ascontiguousarray(bias[b if bias.shape[0] > 1 else 0][None, :, :S,
                                                                                 :P + S])
            out, present_k, present_v, qk = ort_gqa.gqa(
                q, k, v, *ort_past[b], num_heads=cfg.num_heads, kv_num_heads=cfg.kv_num_heads,
                cos_cache=inputs["cos_cache"], sin_cache=inputs["sin_cache"],
                attention_bias=bias, head_sink=inputs["head_sink"], k_scale=k_scale,
                v_scale=v_scale, **gqa_attributes(cfg))
            what = "%s sequence %d (past %d, new %d) of %s" % (label, b, P, S, cfg)
            checks.assert_close(self, output[rows], out, tol, "output of " + what, seed)
            bt = inputs["block_table"][b]
            for name, present in (("key_cache", present_k), ("value_cache", present_v)):
                ours = gather_bnsh(work[name], bt, P + S, cfg.block_size)[:, P:]
                theirs = present[:, P:]
                if ours.dtype == np.int8:
                    diff = np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max()
                    self.assertLessEqual(int(diff), 1, "%s of %s (seed %d)" % (name, what, seed))
                else:
                    checks.assert_close(self, ours, theirs.astype(F32), 2.0 ** -9,
                                        name + " of " + what, seed)
            if qk is not None:
                ours = output_qk[:, rows, :P + S]
                admitted = np.isfinite(checks.as_f64(ours)) if cfg.qk_output == 1 else \
                    np.ones(ours.shape, bool)
                checks.assert_close(self, np.where(admitted, checks.as_f64(ours), 0),
                                    np.where(admitted, qk, 0), tol, "output_qk of " + what, seed)
            ort_past[b] = (present_k, present_v)

    def initial_past(self, cfg, inputs):
        bt, past = inputs["block_table"], inputs["past_seqlens"]
        return [(gather_bnsh(inputs["key_cache"], bt[b], int(past[b]), cfg.block_size),
                 gather_bnsh(inputs["value_cache"], bt[b], int(past[b]), cfg.block_size))
                for b in range(len(past))]

    def check(self, cfg, seed, decode_steps=0):
        rng = np.random.default_rng(seed)
        cfg = dataclasses.replace(cfg, reserve_tokens=decode_steps)
        inputs, attrs = cases.make_case(cfg, rng)
        ort_past = self.initial_past(cfg, inputs)
        self.compare_step(cfg, inputs, attrs, ort_past, seed, "prefill")
        past = inputs["past_seqlens"] + np.diff(inputs["cumulative_sequence_length"])
        H, Hk, D = cfg.num_heads, cfg.kv_num_heads, cfg.head_size
        for step in range(decode_steps):
            active = rng.random(len(past)) < 0.8  # idle sequences have zero new tokens
            q_lens = active.astype(np.int32)
            n = int(q_lens.sum())
            step_inputs = dict(inputs)
            step_inputs["cumulative_sequence_length"] = np.concatenate(
                [[0], np.cumsum(q_lens)]).astype(np.int32)
            step_inputs["past_seqlens"] = past.astype(np.int32)
            q_width = (H + 2 * Hk) * D if cfg.mode == "PACKED" else H * D
            step_inputs["query"] = cases._normal(rng, (n, q_width), np.float16)
            if cfg.mode != "PACKED":
                step_inputs["key"] = cases._normal(rng, (n, Hk * D), np.float16)
                step_inputs["value"] = cases._normal(rng, (n, Hk * D), np.float16)
            if inputs["attention_bias"] is not None:
                shape = inputs["attention_bias"].shape
                step_inputs["attention_bias"] = cases._normal(rng, (shape[0], shape[1], 1,
                                                                    shape[3]), np.float16)
            self.compare_step(cfg, step_inputs, attrs, ort_past, seed, "decode step %d" % step)
            past = past + q_lens


class NumpyReferenceVsGroupQueryAttention(GroupQueryAttentionParity):
    """The numpy oracle itself against GQA, on the same cases (it needs no library)."""

    def run_operator(self, inputs, attrs):
        expected = checks.run_reference_model(inputs, attrs)
        inputs["key_cache"][...] = expected["key_cache"]
        inputs["value_cache"][...] = expected["value_cache"]
        output = expected["output"].astype(inputs["query"].dtype)
        if attrs["qk_output"]:
            return output, expected["output_qk"].astype(F32)
        return output


BASE = Config(num_heads=8, kv_num_heads=2, head_size=64, q_lens=(3, 0, 1, 6),
              past_lens=(5, 7, 0, 20))
NAMED = {
    "plain": (BASE, 0),
    "decode_steps": (dataclasses.replace(BASE, q_lens=(1, 1, 0), past_lens=(3, 30, 17)), 6),
    "prompt_without_past": (dataclasses.replace(BASE, q_lens=(7, 2), past_lens=(0, 0)), 2),
    "packed_qkv": (dataclasses.replace(BASE, mode="PACKED"), 2),
    "rotary_plain": (dataclasses.replace(BASE, rotary="plain"), 3),
    "rotary_interleaved": (dataclasses.replace(BASE, rotary="interleaved"), 3),
    "rotary_partial": (dataclasses.replace(BASE, rotary="plain", rotary_dim=32), 2),
    "qk_norm_rotary": (dataclasses.replace(BASE, qk_norm=True, rotary="plain"), 2),
    "qk_norm_packed": (dataclasses.replace(BASE, qk_norm=True, mode="PACKED"), 1),
    "window_1": (dataclasses.replace(BASE, window=1), 2),
    "window_5": (dataclasses.replace(BASE, window=5), 4),
    "window_beyond_context": (dataclasses.replace(BASE, window=4096), 1),
    "softcap": (dataclasses.replace(BASE, softcap=4.0, scale=0.4), 2),
    "head_sink": (dataclasses.replace(BASE, head_sink=True), 3),
    "head_sink_window_softcap": (dataclasses.replace(BASE, head_sink=True, window=3,
                                                     softcap=10.0), 2),
    "attention_bias": (dataclasses.replace(BASE, bias=(4, 8, 6, 64)), 2),
    "attention_bias_broadcast": (dataclasses.replace(BASE, bias=(1, 1, 6, 64), softcap=3.0), 2),
    "attention_bias_broadcast_heads": (dataclasses.replace(BASE, bias=(4, 1, 6, 64)), 1),
    "output_qk_1": (dataclasses.replace(BASE, qk_output=1), 2),
    "output_qk_2": (dataclasses.replace(BASE, qk_output=2), 2),
    "output_qk_1_softcap_bias": (dataclasses.replace(BASE, qk_output=1, softcap=2.5,
                                                     bias=(1, 8, 6, 64)), 1),
    "output_qk_2_head_sink_window": (dataclasses.replace(BASE, qk_output=2, head_sink=True,
                                                         window=4), 2),
    "not_causal": (dataclasses.replace(BASE, is_causal=0), 1),
    "int8_per_tensor": (dataclasses.replace(BASE, cache_dtype="int8", quant="PER_TENSOR"), 3),
    "int8_per_channel_rotary": (dataclasses.replace(BASE, cache_dtype="int8",
                                                    quant="PER_CHANNEL", rotary="plain"), 3),
    "head_size_128_block_32": (dataclasses.replace(BASE, head_size=128, block_size=32,
                                                   past_lens=(40, 2, 0, 65)), 2),
}
for group in range(1, 9):
    NAMED["gqa_group_%d" % group] = (dataclasses.replace(BASE, num_heads=2 * group,
                                                         kv_num_heads=2, rotary="plain"), 1)
NAMED["kv_heads_1_group_8"] = (dataclasses.replace(BASE, num_heads=8, kv_num_heads=1), 2)


def _named_test(cfg, steps):
    def test(self):
        self.check(cfg, SEED, decode_steps=steps)
    return test


for _name, (_cfg, _steps) in NAMED.items():
    setattr(GroupQueryAttentionParity, "test_" + _name, _named_test(_cfg, _steps))
    setattr(NumpyReferenceVsGroupQueryAttention, "test_" + _name, _named_test(_cfg, _steps))


if __name__ == "__main__":
    if ort_gqa.available():
        print("onnxruntime %s; seed %d (PAGEDATTN_TEST_SEED=%d repeats this run)"
              % (ort_gqa.ort.__version__, SEED, SEED))
    unittest.main(verbosity=1)
