"""An independent numpy model of the operator, written from doc/semantics.md (not from
lib/reference.c): the write path in float32 as the page prescribes, attention in float64.

paged_attention_reference(...) takes the operator's inputs as numpy arrays (T = float16 or
ml_dtypes.bfloat16; caches of T, int8 or ml_dtypes.float8_e4m3fn) and returns a dict with
"output" (float64, before the final rounding to T), "key_cache" / "value_cache" (new arrays: the
caches after the write) and "output_qk" (float64, when qk_output != 0).
"""
import numpy as np

try:
    import ml_dtypes
except ImportError:  # only bfloat16 / float8 cases need it
    ml_dtypes = None

F32 = np.float32


def _round_to(x, dtype):
    """One rounding of float32 values to T (round to nearest even)."""
    return x.astype(F32).astype(dtype).astype(F32)


def _rms_norm(x, weight, eps):
    """x: (N, heads, D) float32; per head over D, the mean accumulated in float32."""
    mean_sq = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    inv = F32(1.0) / np.sqrt(mean_sq + F32(eps))
    return (x * inv * weight.astype(F32)).astype(F32)


def _rope(x, positions, cos_cache, sin_cache, offset, interleaved):
    """x: (N, heads, D) float32, rotated over channels [offset, offset + R) at each token's position;
    positions outside the tables pass through."""
    half = cos_cache.shape[1]
    rows = cos_cache.shape[0]
    inside = (positions >= 0) & (positions < rows)
    safe = np.where(inside, positions, 0)
    cos = cos_cache.astype(F32)[safe][:, None, :]
    sin = sin_cache.astype(F32)[safe][:, None, :]
    out = x.copy()
    if interleaved:
        i1 = offset + 2 * np.arange(half)
        i2 = i1 + 1
    else:
        i1 = offset + np.arange(half)
        i2 = i1 + half
    x1, x2 = x[:, :, i1], x[:, :, i2]
    r1 = (x1 * cos - x2 * sin).astype(F32)
    r2 = (x2 * cos + x1 * sin).astype(F32)
    out[:, :, i1] = np.where(inside[:, None, None], r1, x1)
    out[:, :, i2] = np.where(inside[:, None, None], r2, x2)
    return out


def _scale_vector(scale, quant_type, heads, head_size):
    """The per (head, channel) scale as a (heads, head_size) float32 array."""
    if quant_type == "PER_TENSOR":
        return np.full((heads, head_size), scale.reshape(-1)[0], dtype=F32)
    return scale.reshape(-1)[: heads * head_size].astype(F32).reshape(heads, head_size)


def quantize(x, cache_dtype, scale):
    """x (float32, already rounded to T), scale broadcastable: the cache's element values."""
    inv = (F32(1.0) / scale.astype(F32)).astype(F32)
    y = (x * inv).astype(F32)
    if cache_dtype == np.int8:
        return np.clip(np.rint(y), -128, 127).astype(np.int8)
    return np.clip(y, F32(-448), F32(448)).astype(cache_dtype)


def dequantize(q, scale):
    return (q.astype(F32) * scale.astype(F32)).astype(F32)


def _is_quantized(cache):
    return cache.dtype == np.int8 or (ml_dtypes is not None
                                      and cache.dtype == np.dtype(ml_dtypes.float8_e4m3fn))


def paged_attention_reference(query, key, value, key_cache, value_cache,
                              cumulative_sequence_length, past_seqlens, block_table,
                              cos_cache=None, sin_cache=None, slot_mapping=None, head_sink=None,
                              q_norm_weight=None, k_norm_weight=None, k_scale=None, v_scale=None,
                              query_positions=None, attention_bias=None, *, num_heads,
                              kv_num_heads, scale=0.0, softcap=0.0, local_window_size=-1,
                              do_rotary=0, rotary_interleaved=0, qk_norm_epsilon=1e-6,
                              k_quant_type="NONE", v_quant_type="NONE", v_head_size=0,
                              rotary_offset=0, kv_cache_layout="SEPARATE", qk_output=0,
                              is_causal=1, qk_capacity=None):
    T = query.dtype
    H, Hk = num_heads, kv_num_heads
    g = H // Hk
    latent = kv_cache_layout == "LATENT"
    packed = not latent and key is None
    N = query.shape[0]
    D = query.shape[1] // (H + 2 * Hk) if packed else query.shape[1] // H
    Dv = v_head_size or D
    cache_heads = 1 if latent else Hk
    num_blocks, bs = key_cache.shape[0], key_cache.shape[1]
    M = block_table.shape[1]
    cu = cumulative_sequence_length.astype(np.int64)
    past = past_seqlens.astype(np.int64)
    B = past.shape[0]
    eps = qk_norm_epsilon or 1e-6
    scale = scale or 1.0 / np.sqrt(D)

    # token -> sequence, index in sequence, position
    t = np.arange(N)
    seq = np.full(N, -1, dtype=np.int64)
    for b in range(B):
        seq[(t >= cu[b]) & (t < cu[b + 1])] = b
    has_seq = seq >= 0
    j = np.where(has_seq, t - cu[np.maximum(seq, 0)], 0)
    if query_positions is not None:
        pos = query_positions.astype(np.int64)
    else:
        pos = np.where(has_seq, past[np.maximum(seq, 0)] + j, -1)

    # 1. unpack, in float32
    q32 = query.astype(F32)
    if packed:
        qh = q32[:, : H * D].reshape(N, H, D)
        kh = q32[:, H * D:(H + Hk) * D].reshape(N, Hk, D)
        vh = q32[:, (H + Hk) * D:].reshape(N, Hk, D)
    else:
        qh = q32.reshape(N, H, D)
        kh = key.astype(F32).reshape(N, cache_heads, D)
        vh = None if latent else value.astype(F32).reshape(N, Hk, D)
    # 2. QK-Norm, 3. RoPE, 4. one rounding to T
    if q_norm_weight is not None:
        qh = _rms_norm(qh, q_norm_weight, eps)
        kh = _rms_norm(kh, k_norm_weight, eps)
    if do_rotary:
        qh = _rope(qh, pos, cos_cache, sin_cache, rotary_offset, rotary_interleaved)
        kh = _rope(kh, pos, cos_cache, sin_cache, rotary_offset, rotary_interleaved)
    qh, kh = _round_to(qh, T), _round_to(kh, T)
    vh = None if vh is None else _round_to(vh, T)

    # 5. quantize, 6. write
    key_cache = key_cache.copy()
    value_cache = None if value_cache is None else value_cache.copy()
    k_scale_hd = v_scale_hd = None
    if _is_quantized(key_cache):
        k_scale_hd = _scale_vector(k_scale, k_quant_type, cache_heads, D)
    if value_cache is not None and _is_quantized(value_cache):
        v_scale_hd = _scale_vector(v_scale, v_quant_type, Hk, D)
    if slot_mapping is not None:
        slot = slot_mapping.astype(np.int64).copy()
    else:
        block_idx = np.where(pos >= 0, pos // bs, M)
        in_table = (pos >= 0) & (block_idx < M)
        block_id = np.where(in_table,
                            block_table[np.maximum(seq, 0), np.minimum(block_idx, M - 1)], -1)
        mapped = in_table & (block_id >= 0) & (block_id < num_blocks)
        slot = np.where(mapped, block_id * bs + pos % bs, -1)
    writes = has_seq & (slot >= 0) & (slot < num_blocks * bs)
    k_rows = kh if k_scale_hd is None else quantize(kh, key_cache.dtype, k_scale_hd)
    kc_flat = key_cache.reshape(num_blocks * bs, cache_heads, D)
    kc_flat[slot[writes]] = k_rows[writes].astype(key_cache.dtype)
    if value_cache is not None:
        v_rows = vh if v_scale_hd is None else quantize(vh, value_cache.dtype, v_scale_hd)
        vc_flat = value_cache.reshape(num_blocks * bs, Hk, D)
        vc_flat[slot[writes]] = v_rows[writes].astype(value_cache.dtype)

    # attention, per sequence, reading every key from the cache
    def cached(cache, scale_hd):
        x = cache.astype(F32)
        if scale_hd is not None:
            x = dequantize(cache, scale_hd[None, None])
        return x.astype(np.float64)

    k_all = cached(key_cache, k_scale_hd)
    if latent:
        v_all = k_all[..., :Dv]
    else:
        v_all = cached(value_cache, v_scale_hd)
    sink = None if head_sink is None else head_sink.astype(F32).astype(np.float64)
    bias = None if attention_bias is None else attention_bias.astype(F32).astype(np.float64)
    C = qk_capacity if qk_capacity is not None else M * bs
    out = np.zeros((N, H, Dv), dtype=np.float64)
    qk = None
    if qk_output:
        qk = np.full((H, N, C), -np.inf if qk_output == 1 else 0.0, dtype=np.float64)
    q64 = qh.astype(np.float64)
    head_kv = np.zeros(H, dtype=np.int64) if latent else np.arange(H) // g

    for b in range(B):
        rows = np.nonzero(seq == b)[0]
        if rows.size == 0:
            continue
        kv_len = int(past[b] + rows.size)
        if kv_len <= 0:
            continue
        k_pos = np.arange(kv_len)
        blk = k_pos // bs
        ids = np.where(blk < M, block_table[b, np.minimum(blk, M - 1)], -1).astype(np.int64)
        mapped = (ids >= 0) & (ids < num_blocks)
        safe_ids = np.where(mapped, ids, 0)
        keys = k_all[safe_ids, k_pos % bs][:, head_kv]    # (kv_len, H, D)
        vals = v_all[safe_ids, k_pos % bs][:, head_kv]    # (kv_len, H, Dv)
        p = pos[rows][:, None]                            # (q_len, 1)
        admitted = np.broadcast_to(mapped[None, :], (rows.size, kv_len)).copy()
        if is_causal:
            admitted &= k_pos[None, :] <= p
            if local_window_size > 0:
                admitted &= k_pos[None, :] >= p - local_window_size + 1
        s = scale * np.einsum("qhd,khd->hqk", q64[rows], keys)
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        admitted = np.broadcast_to(admitted[None], s.shape).copy()
        if bias is not None:
            bb = b if bias.shape[0] > 1 else 0
            jj = j[rows]
            j_in = jj < bias.shape[2]
            k_in = k_pos < bias.shape[3]
            admitted &= (j_in[:, None] & k_in[None, :])[None]
            bias_rows = bias[bb][:, np.minimum(jj, bias.shape[2] - 1)][
                :, :, np.minimum(k_pos, bias.shape[3] - 1)]
            s = s + np.broadcast_to(bias_rows, s.shape)
        s_masked = np.where(admitted, s, -np.inf)
        m = s_masked.max(axis=-1, keepdims=True)
        if sink is not None:
            m = np.maximum(m, sink[:, None, None])
        any_admitted = admitted.any(axis=-1, keepdims=True)
        m = np.where(any_admitted, m, 0.0)
        e = np.where(admitted, np.exp(s_masked - m), 0.0)
        den = e.sum(axis=-1, keepdims=True)
        if sink is not None:
            den = den + np.exp(sink[:, None, None] - m)
        prob = np.where(any_admitted, e / np.where(den > 0, den, 1.0), 0.0)
        out[rows] = np.einsum("hqk,khc->qhc", prob, vals)
        if qk is not None:
            width = min(kv_len, C)
            vals_qk = s if qk_output == 1 else prob
            fill = -np.inf if qk_output == 1 else 0.0
            qk[:, rows, :width] = np.where(admitted, vals_qk, fill)[:, :, :width]

    result = {"output": out.reshape(N, H * Dv), "key_cache": key_cache,
              "value_cache": value_cache}
    if qk is not None:
        result["output_qk"] = qk
    return result
