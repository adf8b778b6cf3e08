"""onnxruntime's CPU com.microsoft::GroupQueryAttention as an external oracle, one call per sequence
(test/python/test_ort_parity.py; the mapping is in doc/development.md, "Oracles and tolerances").

gqa(...) runs one sequence: query/key/value rows of its new tokens, past K/V in BNSH, and returns
(output, present_key, present_value, output_qk or None) as float32 numpy arrays.
"""
import numpy as np

try:
    from onnx import TensorProto, helper
    import onnxruntime as ort
except ImportError:  # the tests skip when either is missing
    ort = None

INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
          "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale",
          "v_scale")
OUTPUTS = ("output", "present_key", "present_value", "output_qk")

_sessions = {}


def available():
    return ort is not None


def _elem(dtype):
    return {np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.float32): TensorProto.FLOAT,
            np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
            np.dtype(np.int8): TensorProto.INT8}[
        np.dtype(dtype)]


def _session(attrs, feeds, with_qk):
    key = (tuple(sorted(attrs.items())),
           tuple((n, feeds[n].dtype.str, feeds[n].ndim) for n in INPUTS if n in feeds), with_qk)
    sess = _sessions.get(key)
    if sess is not None:
        return sess
    node_inputs = [n if n in feeds else "" for n in INPUTS]
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    outputs = list(OUTPUTS if with_qk else OUTPUTS[:3])
    node = helper.make_node("GroupQueryAttention", node_inputs, outputs, domain="com.microsoft",
                            **attrs)
    t = feeds["query"].dtype
    cache = feeds["past_key"].dtype
    graph = helper.make_graph(
        [node], "gqa",
        [helper.make_tensor_value_info(n, _elem(feeds[n].dtype), [None] * feeds[n].ndim)
         for n in INPUTS if n in feeds],
        [helper.make_tensor_value_info("output", _elem(t), None),
         helper.make_tensor_value_info("present_key", _elem(cache), None),
         helper.make_tensor_value_info("present_value", _elem(cache), None)]
        + ([helper.make_tensor_value_info("output_qk", _elem(t), None)] if with_qk else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    _sessions[key] = sess
    return sess


def gqa(query, key, value, past_key, past_value, *, num_heads, kv_num_heads, cos_cache=None,
        sin_cache=None, attention_bias=None, head_sink=None, position_ids=None, k_scale=None,
        v_scale=None, **attrs):
    """query (S, H*D) or packed (S, (H+2Hk)*D); key/value (S, Hk*D) or None; past (Hk, P, D) in the
    cache's type (float16 or int8 with k_scale / v_scale); present K/V come back in that type.
    attrs: scale, softcap, local_window_size, do_rotary, rotary_interleaved, qk_output, causal,
    smooth_softmax (GQA's own attribute names)."""
    S = query.shape[0]
    past_len = past_key.shape[1]
    feeds = {"query": query[None], "past_key": past_key[None], "past_value": past_value[None],
             "seqlens_k": np.array([past_len + S - 1], dtype=np.int32),
             "total_sequence_length": np.array(past_len + S, dtype=np.int32)}
    if key is not None:
        feeds["key"], feeds["value"] = key[None], value[None]
    if cos_cache is not None:
        feeds["cos_cache"], feeds["sin_cache"] = cos_cache, sin_cache
    if position_ids is not None:
        feeds["position_ids"] = position_ids.reshape(1, S).astype(np.int64)
    if attention_bias is not None:
        feeds["attention_bias"] = attention_bias
    if head_sink is not None:
        feeds["head_sink"] = head_sink
    if k_scale is not None:
        feeds["k_scale"], feeds["v_scale"] = k_scale, v_scale
    attrs = {k: v for k, v in attrs.items() if v is not None}
    attrs.update(num_heads=num_heads, kv_num_heads=kv_num_heads)
    with_qk = bool(attrs.get("qk_output", 0))
    sess = _session(attrs, feeds, with_qk)
    results = sess.run(None, feeds)
    return (results[0][0].astype(np.float32), results[1][0], results[2][0],
            results[3][0].astype(np.float32) if with_qk else None)
