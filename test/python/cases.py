"""Random operator inputs shared by the python and gpu suites: a Config says which features a case
exercises, make_case draws fresh seeded data for it (never zeros)."""
import dataclasses
import os

import numpy as np

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


def seed_from_env(default):
    """PAGEDATTN_TEST_SEED reproduces a failing run; otherwise a fresh seed per run."""
    env = os.environ.get("PAGEDATTN_TEST_SEED")
    if env:
        return int(env)
    return default if default is not None else int.from_bytes(os.urandom(4), "little")


@dataclasses.dataclass
class Config:
    num_heads: int = 4
    kv_num_heads: int = 2
    head_size: int = 64
    block_size: int = 16
    q_lens: tuple = (3, 1)
    past_lens: tuple = (5, 20)
    dtype: str = "float16"            # T: float16 or bfloat16
    cache_dtype: str = ""             # "" (= T), "int8", "float8e4m3fn"
    quant: str = "NONE"               # with a quantized cache: PER_TENSOR or PER_CHANNEL
    mode: str = "SEPARATE"            # SEPARATE, PACKED, LATENT
    rotary: str = "none"              # none, plain, interleaved
    rotary_dim: int = 0               # 0 = head_size - rotary_offset
    rotary_offset: int = 0
    rotary_rows: int = 0              # cos/sin rows; 0 = enough for every position
    qk_norm: bool = False
    window: int = -1
    softcap: float = 0.0
    scale: float = 0.0
    head_sink: bool = False
    bias: tuple = None                # (batch or 1, heads or 1, q capacity, kv capacity)
    qk_output: int = 0
    slot_minus_one: bool = False      # explicit slot_mapping with some -1
    slot_mapping: bool = False        # explicit slot_mapping equal to the derived one
    unmapped_blocks: bool = False     # some needed block ids are -1
    query_positions: bool = False     # positions shifted back per sequence
    is_causal: int = 1
    v_head_size: int = 0              # LATENT only
    spare_blocks: int = 3             # table entries (-1) per sequence beyond the mapped ones
    reserve_tokens: int = 0           # positions mapped beyond each kv_len (for later decode steps)


def t_dtype(name):
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def cache_np_dtype(cfg):
    if cfg.cache_dtype == "int8":
        return np.dtype(np.int8)
    if cfg.cache_dtype == "float8e4m3fn":
        return np.dtype(ml_dtypes.float8_e4m3fn)
    return t_dtype(cfg.dtype)


def _normal(rng, shape, dtype, std=1.0):
    x = rng.standard_normal(shape).astype(np.float32) * std
    x[x == 0] = 0.5
    return x.astype(dtype)


def make_case(cfg, rng):
    """Inputs (numpy, in schema order by name) and attributes for cfg."""
    T = t_dtype(cfg.dtype)
    H, Hk, D, bs = cfg.num_heads, cfg.kv_num_heads, cfg.head_size, cfg.block_size
    latent = cfg.mode == "LATENT"
    cache_heads = 1 if latent else Hk
    B = len(cfg.q_lens)
    q_lens = np.array(cfg.q_lens, dtype=np.int32)
    past = np.array(cfg.past_lens, dtype=np.int32)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    N = int(cu[-1])
    kv_lens = past + q_lens
    needed = [max(1, -(-(int(k) + cfg.reserve_tokens) // bs)) for k in kv_lens]
    M = max(needed) + cfg.spare_blocks
    num_blocks = sum(needed) + 4
    ids = rng.permutation(num_blocks).astype(np.int32)
    block_table = np.full((B, M), -1, dtype=np.int32)
    used = 0
    for b in range(B):
        block_table[b, :needed[b]] = ids[used:used + needed[b]]
        used += needed[b]
    if cfg.unmapped_blocks:
        for b in range(B):
            if needed[b] > 1:
                block_table[b, rng.integers(0, needed[b] - 1)] = -1
        block_table[0, needed[0]:] = 10 ** 6  # out of range ids are unmapped too

    cdt = cache_np_dtype(cfg)
    quantized = cfg.cache_dtype in ("int8", "float8e4m3fn")

    def cache():
        shape = (num_blocks, bs, cache_heads, D)
        if cdt == np.int8:
            c = rng.integers(-100, 101, size=shape).astype(np.int8)
            c[c == 0] = 1
            return c
        return _normal(rng, shape, cdt, std=30.0 if quantized else 1.0)

    inputs = {}
    q_width = (H + 2 * Hk) * D if cfg.mode == "PACKED" else H * D
    inputs["query"] = _normal(rng, (N, q_width), T)
    inputs["key"] = None if cfg.mode == "PACKED" else _normal(rng, (N, cache_heads * D), T)
    inputs["value"] = None if cfg.mode != "SEPARATE" else _normal(rng, (N, Hk * D), T)
    inputs["key_cache"] = cache()
    inputs["value_cache"] = None if latent else cache()
    inputs["cumulative_sequence_length"] = cu
    inputs["past_seqlens"] = past
    inputs["block_table"] = block_table

    positions = np.concatenate([past[b] + np.arange(q_lens[b]) for b in range(B)]).astype(np.int32) \
        if N else np.zeros(0, dtype=np.int32)
    inputs["query_positions"] = None
    if cfg.query_positions:
        shift = np.concatenate([np.full(q_lens[b], rng.integers(0, past[b] + 1))
                                for b in range(B)]).astype(np.int32)
        positions = positions - shift
        inputs["query_positions"] = positions

    inputs["cos_cache"] = inputs["sin_cache"] = None
    if cfg.rotary != "none":
        rdim = cfg.rotary_dim or D - cfg.rotary_offset
        rows = cfg.rotary_rows or int(kv_lens.max()) + cfg.reserve_tokens + 4
        theta = rng.uniform(0, 2 * np.pi, size=(rows, rdim // 2)).astype(np.float32)
        inputs["cos_cache"] = np.cos(theta).astype(T)
        inputs["sin_cache"] = np.sin(theta).astype(T)

    inputs["slot_mapping"] = None
    if cfg.slot_mapping or cfg.slot_minus_one:
        blk = positions // bs
        seq = np.repeat(np.arange(B), q_lens)
        slots = (block_table[seq, blk].astype(np.int64) * bs + positions % bs).astype(np.int32)
        if cfg.slot_minus_one and N:
            slots[rng.random(N) < 0.3] = -1
            slots[0] = -1
        inputs["slot_mapping"] = slots

    inputs["head_sink"] = _normal(rng, (H,), T) if cfg.head_sink else None
    inputs["q_norm_weight"] = inputs["k_norm_weight"] = None
    if cfg.qk_norm:
        inputs["q_norm_weight"] = rng.uniform(0.5, 1.5, size=D).astype(T)
        inputs["k_norm_weight"] = rng.uniform(0.5, 1.5, size=D).astype(T)

    def scales(heads):
        if cfg.quant == "PER_TENSOR":
            return rng.uniform(0.02, 0.05, size=(1,)).astype(np.float32)
        return rng.uniform(0.02, 0.05, size=(heads, 1, D)).astype(np.float32)

    inputs["k_scale"] = scales(cache_heads) if quantized else None
    inputs["v_scale"] = scales(Hk) if quantized and not latent else None
    inputs["attention_bias"] = _normal(rng, cfg.bias, T) if cfg.bias else None

    attrs = dict(num_heads=H, kv_num_heads=Hk, scale=cfg.scale, softcap=cfg.softcap,
                 local_window_size=cfg.window, do_rotary=int(cfg.rotary != "none"),
                 rotary_interleaved=int(cfg.rotary == "interleaved"),
                 rotary_offset=cfg.rotary_offset, qk_output=cfg.qk_output,
                 is_causal=cfg.is_causal, kv_cache_layout="LATENT" if latent else "SEPARATE",
                 v_head_size=cfg.v_head_size)
    if quantized:
        attrs.update(k_quant_type=cfg.quant, k_cache_dtype=cfg.cache_dtype)
        if not latent:
            attrs.update(v_quant_type=cfg.quant, v_cache_dtype=cfg.cache_dtype)
    return inputs, attrs


ORDER = ("query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length",
         "past_seqlens", "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink",
         "q_norm_weight", "k_norm_weight", "k_scale", "v_scale", "attention_metadata",
         "query_positions", "attention_bias")


def positional(inputs):
    """The inputs as the operator's positional argument list."""
    return [inputs.get(name) for name in ORDER]


def reference_kwargs(attrs):
    """The numpy reference takes the same attributes minus the cache dtype strings."""
    return {k: v for k, v in attrs.items() if k not in ("k_cache_dtype", "v_cache_dtype")}


def torch_available():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def to_torch(x, device="cpu"):
    """A numpy array (ml_dtypes bfloat16 / float8 included) as a torch tensor with the same bytes."""
    import torch
    name = x.dtype.name
    if name == "bfloat16":
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16).to(device)
    if name == "float8_e4m3fn":
        return torch.from_numpy(x.view(np.uint8).copy()).view(torch.float8_e4m3fn).to(device)
    return torch.from_numpy(x.copy()).to(device)


def to_numpy(t, like):
    """A torch tensor back to numpy with the dtype of the numpy array `like`."""
    import torch
    t = t.detach().cpu().contiguous()
    if like.dtype.itemsize == 2 and t.dtype != torch.float16:
        return t.view(torch.int16).numpy().view(like.dtype)
    if like.dtype.itemsize == 1:
        return t.view(torch.uint8).numpy().view(like.dtype)
    return t.numpy().astype(like.dtype, copy=False)
