#!/usr/bin/env python3
"""Writes the seed corpus of test/fuzz (corpus/plan, corpus/execute) in the input formats that
fuzz_plan.c and fuzz_execute.c document. The seeds issue19-* are the reproducers of issue 19.
Run from anywhere: python3 test/fuzz/make_seeds.py; the output is committed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
INT32_MAX, INT32_MIN = 2**31 - 1, -2**31
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63

# fuzz_plan.c: interesting[] and the field numbering
PLAN_INTERESTING = [0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 63, 64, 65, 100, 128, 256, 512, 576,
                    1000, 4096, 65535, 65536, 65552, 1 << 20, 16776960, 8388608, 1 << 24, 1 << 30,
                    INT32_MAX, INT32_MAX + 1, 1 << 32, 1 << 40, 1 << 60, 1 << 62, INT64_MAX // 2,
                    INT64_MAX, -1, -2, -7, INT32_MIN, INT64_MIN]
ATTRIBUTES = ["num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "do_rotary",
              "rotary_interleaved", "qk_norm_epsilon", "k_quant_type", "v_quant_type",
              "k_cache_dtype", "v_cache_dtype", "v_head_size", "rotary_offset", "kv_cache_layout",
              "qk_output", "is_causal"]
INPUTS = ["query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length",
          "past_seqlens", "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink",
          "q_norm_weight", "k_norm_weight", "k_scale", "v_scale", "attention_metadata",
          "query_positions", "attention_bias"]
OUTPUTS = ["output", "key_cache_out", "value_cache_out", "output_qk"]
TENSORS = INPUTS + OUTPUTS
BACKENDS = {"AUTO": 0, "REFERENCE": 1, "DECODE": 2, "PREFILL": 3, "UNFUSED": 4, "LATENT": 5}
DEVICES = {"host": 0, "a100": 1, "h200": 2}
KINDS = {"separate": 0, "packed_rotary": 1, "latent": 2, "int8_features": 3}


def plan_value(v):
    if v in PLAN_INTERESTING:
        return bytes([PLAN_INTERESTING.index(v)])
    return bytes([255]) + struct.pack("<q", v)


def plan_seed(kind, device, backend, edits):
    """edits: (attribute, value) or (tensor, 'dims', i, value) or (tensor, 'dtype'|'rank', v)."""
    out = bytes([KINDS[kind], DEVICES[device], BACKENDS[backend]])
    for edit in edits:
        if len(edit) == 2:
            field = ATTRIBUTES.index(edit[0])
            value = edit[1]
        else:
            tensor = TENSORS.index(edit[0])
            part = {"dtype": 0, "rank": 1}.get(edit[1])
            if part is None:
                part, value = 2 + edit[2], edit[3]
            else:
                value = edit[2]
            field = len(ATTRIBUTES) + 6 * tensor + part
        out += bytes([field]) + plan_value(value)
    return out


def dims(tensor, *values):
    return [(tensor, "dims", i, v) for i, v in enumerate(values)]


def caches(*values):
    return [e for t in ("key_cache", "value_cache", "key_cache_out", "value_cache_out")
            for e in dims(t, *values)]


def plan_seeds():
    seeds = {}
    # 1: block_size 2^30 and a block table of 16776960 (split size 0: SIGFPE) or 8388608 entries
    # (negative split size: silently zero output), one token of one sequence, DECODE on an A100.
    for name, entries in (("1-sigfpe", 16776960), ("1-negative-split", 8388608)):
        edits = (dims("query", 1) + dims("key", 1) + dims("value", 1) + dims("output", 1) +
                 caches(1, 1 << 30) + dims("cumulative_sequence_length", 2) +
                 dims("past_seqlens", 1) + dims("block_table", 1, entries))
        seeds["issue19-" + name] = plan_seed("separate", "a100", "DECODE", edits)
    # 2: 65552 query heads over 16 KV heads, head_size 16, 64k keys of table: DECODE's merge grid
    # would need gridDim.y = 65552.
    edits = ([("num_heads", 65552), ("kv_num_heads", 16)] + dims("query", 4, 65552 * 16) +
             dims("key", 4, 256) + dims("value", 4, 256) + dims("output", 4, 65552 * 16) +
             caches(8, 16, 16, 16) + dims("block_table", 2, 4096))
    seeds["issue19-2-merge-grid"] = plan_seed("separate", "a100", "DECODE", edits)
    # 3: key_cache (2^60, 16, 1, 8): num_blocks * block_size overflows int64.
    edits = ([("num_heads", 1), ("kv_num_heads", 1)] + dims("query", 4, 8) + dims("key", 4, 8) +
             dims("value", 4, 8) + dims("output", 4, 8) + caches(1 << 60, 16, 1, 8))
    seeds["issue19-3-cache-size"] = plan_seed("separate", "host", "AUTO", edits)
    # 4: cos_cache dim1 2^62: rotary_dim = 2 * dim1 wraps to INT64_MIN.
    edits = dims("cos_cache", 128, 1 << 62) + dims("sin_cache", 128, 1 << 62)
    seeds["issue19-4-rotary-dim"] = plan_seed("packed_rotary", "host", "AUTO", edits)
    # 5 (plan side): block_size 2^30, a one-block table, 64 tokens x 32 heads on the host.
    edits = ([("num_heads", 32), ("kv_num_heads", 8)] + dims("query", 64, 32 * 64) +
             dims("key", 64, 8 * 64) + dims("value", 64, 8 * 64) + dims("output", 64, 32 * 64) +
             caches(1, 1 << 30, 8, 64) + dims("cumulative_sequence_length", 2) +
             dims("past_seqlens", 1) + dims("block_table", 1, 1))
    seeds["issue19-5-unmapped-reach"] = plan_seed("separate", "host", "AUTO", edits)
    # 6: LATENT on an H200, blocks of 2^30 keys and a table of 2^23 per sequence: the balanced
    # split search tried 2^47 split counts (a timeout).
    edits = (dims("key_cache", 1, 1 << 30) + dims("key_cache_out", 1, 1 << 30) +
             dims("block_table", 2, 1 << 23))
    seeds["issue19-6-latent-split-search"] = plan_seed("latent", "h200", "LATENT", edits)
    # the valid bases on every device, and a few plain ones
    for kind in KINDS:
        for device in DEVICES:
            seeds["base-%s-%s" % (kind, device)] = plan_seed(kind, device, "AUTO", [])
    seeds["parse-int8"] = b"int8"
    seeds["parse-per-channel"] = b"PER_CHANNEL"
    seeds["parse-latent"] = b"LATENT"
    return seeds


# fuzz_execute.c: interesting_int32[] and the extra selectors
EXEC_INTERESTING = [-1, 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 1 << 24,
                    INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1, -2, -16, -1000000]
DEFAULT = 200  # keeps the plausible default value


def exec_value(v):
    if v is None:
        return bytes([DEFAULT])
    if v == "capacity":
        return bytes([len(EXEC_INTERESTING)])
    if v in EXEC_INTERESTING:
        return bytes([EXEC_INTERESTING.index(v)])
    return bytes([255]) + struct.pack("<i", v)


def exec_seed(mode=0, bf16=0, cache=0, per_channel=0, kv=1, group=1, head=1, block=0, batch=2,
              tokens=4, per_seq=2, num_blocks=6, features=0, more=0, extras=0, extra_bytes=(),
              device=()):
    """Choices as fuzz_execute.c reads them (batch, tokens, per_seq, num_blocks as values)."""
    out = bytes([mode, bf16, cache, per_channel, kv, group, head, block, batch - 1, tokens,
                 per_seq - 1, num_blocks, features, more, extras]) + bytes(extra_bytes)
    for v in device:
        out += exec_value(v)
    return out


def exec_seeds():
    seeds = {}
    # 5: block_size 2^30 (no blocks), a table of one unmapped block (-1), 2^24 keys of past, 8
    # tokens x 8 heads: the reference gathered the table's whole reach.
    seeds["issue19-5-unmapped-reach"] = exec_seed(
        kv=1, group=2, head=2, block=2, batch=1, tokens=8, per_seq=1, num_blocks=0,
        device=[None, None, 1 << 24, -1])
    seeds["valid-separate"] = exec_seed()
    seeds["valid-all-features"] = exec_seed(
        cache=1, per_channel=1, features=0xff, more=0x35, extras=0x3f | 0x40,
        extra_bytes=(5, 120, 6, 40, 0, 50))
    seeds["valid-latent-int8"] = exec_seed(mode=2, bf16=1, cache=1, per_channel=1, head=2,
                                           features=0x11, more=0x08)
    seeds["valid-packed-fp8"] = exec_seed(mode=1, cache=2, features=0xb0, more=0x10)
    # device data at the edges: non-monotonic and extreme cumulative lengths, INT32_MIN/MAX past
    # lengths, out-of-range block ids and slots, negative and huge positions
    seeds["device-extremes"] = exec_seed(
        features=0x20, extras=0x02, batch=3, tokens=6,
        device=[INT32_MAX, INT32_MIN, 3, 2, INT32_MAX, INT32_MIN, 1 << 24,
                -1, 6, INT32_MAX, 0, 5, 100,
                -1, "capacity", INT32_MIN, 95, 0, INT32_MAX,
                -1, INT32_MAX, INT32_MIN, 0, 1 << 24, -16])
    seeds["device-non-monotonic"] = exec_seed(
        batch=4, tokens=8, device=[0, 6, 2, 8, 1, 0, 5, 7, 2])
    return seeds


def main():
    for target, seeds in (("plan", plan_seeds()), ("execute", exec_seeds())):
        folder = os.path.join(HERE, "corpus", target)
        os.makedirs(folder, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
