"""pagedattn: Python binding of libpagedattn (ctypes).

One function, paged_attention, mirrors the operator (doc/semantics.md): inputs in the schema's
order, attributes as keyword arguments with the schema's names. CUDA arrays (torch, cupy, anything
with __cuda_array_interface__) run pa_execute on the caller's current stream, with the workspace
taken from the caller's framework, so the call can be captured in a CUDA graph. Host arrays (numpy,
CPU torch; bfloat16 / float8 through ml_dtypes or torch) run the library's reference executor.
With PA_CHECK=1 in the environment or contract_check=True, CUDA calls also run the device contract
checker, and check_status() reports what it found.
"""
import collections
import ctypes
import numbers
import operator
import os
import threading

from . import _arrays
from . import _capi as C

__all__ = ["paged_attention", "Error", "clear_plan_cache", "library_path", "check_status"]

PLAN_CACHE_SIZE = 64


class Error(RuntimeError):
    """A failed call: `status` (pa_status value), `status_name` ("PA_ERROR_INVALID_ARGUMENT") and
    `message` (the library's detail, or the binding's, naming the argument)."""

    def __init__(self, status, status_name, message):
        super().__init__("%s: %s" % (status_name, message))
        self.status, self.status_name, self.message = status, status_name, message


def _argument_error(message):
    return Error(C.PA_ERROR_INVALID_ARGUMENT, "PA_ERROR_INVALID_ARGUMENT", message)


def _check(status):
    if status != C.PA_SUCCESS:
        raise Error(status, C.status_name(status), C.last_error_message())


def library_path():
    """The path of the loaded libpagedattn.so."""
    return C.library().path


class _Plan:
    """Owns one pa_plan; destroyed with the object (when the cache evicts it)."""

    def __init__(self, attrs, in_descs, out_descs, options):
        lib = C.library()
        handle = ctypes.c_void_p()
        _check(lib.pa_plan_create(ctypes.byref(handle), ctypes.byref(attrs), in_descs, out_descs,
                                  ctypes.byref(options)))
        self._destroy = lib.pa_plan_destroy
        self.handle = handle.value
        self.workspace_size = lib.pa_plan_workspace_size(self.handle)
        self.backend = lib.pa_backend_name(lib.pa_plan_backend(self.handle)).decode()
        self.contract_check = bool(lib.pa_plan_contract_check(self.handle))

    def check_status(self, workspace, stream):
        """pa_plan_check_status on a workspace address and a stream handle: None when no checked
        call since the last read found a violation, else the violation's message. Clears it."""
        message = ctypes.create_string_buffer(1024)
        status = C.library().pa_plan_check_status(self.handle, workspace, stream, message,
                                                  len(message))
        if status == C.PA_ERROR_CONTRACT_VIOLATION:
            return message.value.decode(errors="replace")
        _check(status)
        return None

    def __del__(self):
        if getattr(self, "handle", None):
            self._destroy(self.handle)
            self.handle = None


_plans = collections.OrderedDict()
_plans_lock = threading.Lock()


class _CheckedWorkspace:
    """The workspace of one device's checked calls, kept between calls so that the contract
    checker's status (its first PA_CHECK_STATUS_BYTES) survives until check_status reads it; grown
    when a plan needs more, the status carried over. `plan`: the last checked plan that used it."""

    def __init__(self, like, nbytes, previous):
        align = C.PA_WORKSPACE_ALIGNMENT
        self.array = _arrays.empty(like, (nbytes + align,), C.PA_DTYPE_UINT8)
        base = _arrays.wrap("workspace", self.array).ptr
        self.offset = (base + align - 1) // align * align - base
        self.ptr, self.nbytes = base + self.offset, nbytes
        status = slice(self.offset, self.offset + C.PA_CHECK_STATUS_BYTES)
        if previous is None:  # fresh memory may hold an earlier workspace's status
            self.array[status] = 0
        else:
            self.array[status] = previous.array[
                previous.offset:previous.offset + C.PA_CHECK_STATUS_BYTES]
        self.plan = previous.plan if previous is not None else None


_checked_workspaces = {}  # (framework, device) -> _CheckedWorkspace


def _checked_workspace(plan, like, framework, device):
    with _plans_lock:
        key = (framework, device)
        workspace = _checked_workspaces.get(key)
        if workspace is None or workspace.nbytes < plan.workspace_size:
            workspace = _CheckedWorkspace(like, max(plan.workspace_size, C.PA_CHECK_STATUS_BYTES),
                                          workspace)
            _checked_workspaces[key] = workspace
        workspace.plan = plan
        return workspace


def check_status(device=None, stream=None):
    """Reads and clears what the device contract checker recorded (doc/python.md): None when no
    checked call since the last read broke the contract, else the first violation's message,
    naming the tensor, the index and the value. device: a CUDA ordinal, or None for every device
    with checked calls. Synchronizes the stream (the current one unless `stream` is given). Raises
    pagedattn.Error when no checked call has run."""
    with _plans_lock:
        entries = [(key, w) for key, w in _checked_workspaces.items()
                   if device is None or key[1] == device]
    if not entries:
        raise _argument_error("check_status: no checked call has run%s (set PA_CHECK=1 before "
                              "the first call, or pass contract_check=True)"
                              % ("" if device is None else " on device %d" % device))
    messages = []
    for (framework, dev), workspace in entries:
        with _device_context(framework, dev):
            message = workspace.plan.check_status(workspace.ptr,
                                                   _stream_handle(stream, framework, dev))
        if message:
            messages.append(message if len(entries) == 1 else "device %d: %s" % (dev, message))
    return "; ".join(messages) or None


def clear_plan_cache():
    with _plans_lock:
        _plans.clear()


def _cached_plan(key, attrs, in_descs, out_descs, options):
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = _Plan(attrs, in_descs, out_descs, options)
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


def _parse(parser, name, value):
    out = ctypes.c_int()
    _check(getattr(C.library(), parser)(value.encode() if value is not None else None,
                                        ctypes.byref(out)))
    return out.value


INT_ATTRIBUTES = ("num_heads", "kv_num_heads", "local_window_size", "do_rotary",
                  "rotary_interleaved", "v_head_size", "rotary_offset", "qk_output", "is_causal")
FLOAT_ATTRIBUTES = ("scale", "softcap", "qk_norm_epsilon")
STRING_ATTRIBUTES = ("k_quant_type", "v_quant_type", "k_cache_dtype", "v_cache_dtype",
                     "kv_cache_layout")
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _describe_value(value):
    return "%r (%s)" % (value, type(value).__name__)


def _checked_attributes(kw):
    """The attributes as the C struct will hold them: integers that fit int32 (a bool, a float or
    a value that would wrap is rejected, not converted), real numbers, strings."""
    checked = dict(kw)
    for name in INT_ATTRIBUTES:
        value = kw[name]
        try:
            if isinstance(value, bool):
                raise TypeError
            number = operator.index(value)
        except TypeError:
            raise _argument_error("%s: expected an integer, got %s"
                                  % (name, _describe_value(value))) from None
        if not INT32_MIN <= number <= INT32_MAX:
            raise _argument_error("%s: expected an integer in [%d, %d] (int32), got %d"
                                  % (name, INT32_MIN, INT32_MAX, number))
        checked[name] = number
    for name in FLOAT_ATTRIBUTES:
        value = kw[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _argument_error("%s: expected a real number, got %s"
                                  % (name, _describe_value(value)))
        checked[name] = float(value)
    for name in STRING_ATTRIBUTES:
        value = kw[name]
        if value is not None and not isinstance(value, str):
            raise _argument_error("%s: expected a string, got %s" % (name, _describe_value(value)))
    return checked


def _attributes(kw):
    attrs = C.Attributes()
    C.library().pa_attributes_init(ctypes.byref(attrs))
    for name in INT_ATTRIBUTES + FLOAT_ATTRIBUTES:
        setattr(attrs, name, kw[name])
    for name in ("k_quant_type", "v_quant_type"):
        setattr(attrs, name, _parse("pa_quant_type_parse", name, kw[name]))
    for name in ("k_cache_dtype", "v_cache_dtype"):
        setattr(attrs, name, _parse("pa_cache_dtype_parse", name, kw[name]))
    attrs.kv_cache_layout = _parse("pa_kv_cache_layout_parse", "kv_cache_layout",
                                   kw["kv_cache_layout"])
    return attrs


def _describe(desc, arr):
    desc.dtype = arr.dtype
    desc.rank = len(arr.shape)
    for i, d in enumerate(arr.shape):
        desc.dims[i] = d


def _output_shape(query, key, kw):
    """(token_count, num_heads * effective v_head_size), from the shapes (doc/semantics.md)."""
    if len(query.shape) != 2:
        raise _argument_error("query: rank must be 2, got %d" % len(query.shape))
    heads, kv_heads = kw["num_heads"], kw["kv_num_heads"]
    if heads <= 0 or kv_heads <= 0:
        return (query.shape[0], 0)  # the library names the bad attribute
    packed = key is None and kw["kv_cache_layout"] in (None, "", "SEPARATE")
    head_size = query.shape[1] // (heads + 2 * kv_heads if packed else heads)
    v_head_size = kw["v_head_size"] or head_size
    return (query.shape[0], heads * v_head_size)


def _stream_handle(stream, framework, device):
    if stream is not None:
        for attr in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    if framework == "torch":
        import torch
        return torch.cuda.current_stream(device).cuda_stream
    import cupy
    return cupy.cuda.get_current_stream().ptr


def _device_context(framework, device):
    if framework == "torch":
        import torch
        return torch.cuda.device(device)
    import cupy
    return cupy.cuda.Device(device)


def _current_device(framework):
    if framework == "torch":
        import torch
        return torch.cuda.current_device()
    import cupy
    return cupy.cuda.Device().id


def _wrap_arrays(tensors, output_qk, k_cache_dtype, v_cache_dtype):
    """Describe every present input and output_qk; check they share one device."""
    try:
        arrays = [None if t is None else _arrays.wrap(C.INPUT_NAMES[i], t)
                  for i, t in enumerate(tensors)]
        qk_array = None if output_qk is None else _arrays.wrap("output_qk", output_qk)
    except _arrays.ArgumentError as e:
        raise _argument_error(str(e)) from None
    query = arrays[0]
    for name, arr in (*zip(C.INPUT_NAMES, arrays), ("output_qk", qk_array)):
        if arr is None:
            continue
        if arr.is_cuda != query.is_cuda:
            where = {True: "a CUDA device", False: "the host"}
            raise _argument_error("%s: on %s, but query is on %s"
                                  % (name, where[arr.is_cuda], where[query.is_cuda]))
        if arr.is_cuda and -1 not in (arr.device, query.device) and arr.device != query.device:
            raise _argument_error("%s: on CUDA device %d, but query is on device %d"
                                  % (name, arr.device, query.device))
    for idx, cache_dtype in ((C.PA_IN_KEY_CACHE, k_cache_dtype),
                             (C.PA_IN_VALUE_CACHE, v_cache_dtype)):
        # numpy without ml_dtypes and cupy have no float8: their uint8 bytes stand in for it
        if arrays[idx] is not None and arrays[idx].dtype == C.PA_DTYPE_UINT8 \
                and cache_dtype == "float8e4m3fn":
            arrays[idx].dtype = C.PA_DTYPE_FLOAT8_E4M3FN
    return arrays, qk_array


def _metadata_values(attention_metadata):
    if attention_metadata is None:
        return None
    if hasattr(attention_metadata, "__cuda_array_interface__") or getattr(
            getattr(attention_metadata, "device", None), "type", "cpu") != "cpu":
        raise _argument_error("attention_metadata: expected two host ints, got a device array")
    try:
        metadata = tuple(operator.index(v) for v in attention_metadata)
    except TypeError:
        raise _argument_error("attention_metadata: expected two host ints, got %r"
                              % (attention_metadata,)) from None
    if len(metadata) != 2:
        raise _argument_error("attention_metadata: expected 2 values, got %d" % len(metadata))
    for value in metadata:
        if not 0 <= value <= INT32_MAX:
            raise _argument_error("attention_metadata: expected values in [0, %d] (int32), got %d"
                                  % (INT32_MAX, value))
    return metadata


def _output_descs(arrays, qk_array, kw):
    """Output 0 sized from the shapes; output 3 from output_qk, or (num_heads, token_count,
    block_table.shape[1] * block_size) in float32 when the binding allocates it."""
    query, block_table, key_cache = arrays[0], arrays[7], arrays[3]
    descs = C.OutputDescs()
    out = descs[C.PA_OUT_OUTPUT]
    out.dtype, out.rank = query.dtype, 2
    out.dims[0], out.dims[1] = _output_shape(query, arrays[1], kw)
    qk = descs[C.PA_OUT_QK]
    if qk_array is not None:
        _describe(qk, qk_array)
    elif kw["qk_output"] != 0:
        if block_table is None or len(block_table.shape) != 2 or len(key_cache.shape) != 4:
            raise _argument_error("output_qk: cannot size it: block_table must be rank 2 and "
                                  "key_cache rank 4")
        qk.dtype, qk.rank = C.PA_DTYPE_FLOAT32, 3
        qk.dims[0], qk.dims[1] = kw["num_heads"], query.shape[0]
        qk.dims[2] = block_table.shape[1] * key_cache.shape[1]
    return descs


def _execute(plan, arrays, out_arr, qk_array, framework, device, stream):
    q = arrays[0]
    keep_alive = []  # placeholders and the workspace live until the launches are queued

    def address(arr):
        # a zero-element tensor may have address 0, which the library reads as "absent"
        if arr.ptr or arr.size:
            return arr.ptr
        placeholder = _arrays.empty(q, (C.PA_WORKSPACE_ALIGNMENT,), C.PA_DTYPE_UINT8)
        keep_alive.append(placeholder)
        return _arrays.wrap("placeholder", placeholder).ptr

    in_ptrs = C.InputPtrs(*[None if a is None else address(a) for a in arrays])
    out_ptrs = C.OutputPtrs()
    out_ptrs[C.PA_OUT_OUTPUT] = address(out_arr)
    if qk_array is not None:
        out_ptrs[C.PA_OUT_QK] = address(qk_array)
    lib = C.library()
    if not q.is_cuda:
        _check(lib.pa_execute_reference(plan.handle, in_ptrs, out_ptrs))
        return
    with _device_context(framework, device):
        workspace_ptr, workspace_bytes = None, plan.workspace_size
        if plan.contract_check:
            workspace = _checked_workspace(plan, q, framework, device)
            workspace_ptr = workspace.ptr
        elif workspace_bytes:
            align = C.PA_WORKSPACE_ALIGNMENT
            workspace = _arrays.empty(q, (workspace_bytes + align,), C.PA_DTYPE_UINT8)
            keep_alive.append(workspace)
            base = _arrays.wrap("workspace", workspace).ptr
            workspace_ptr = (base + align - 1) // align * align
        _check(lib.pa_execute(plan.handle, in_ptrs, out_ptrs, workspace_ptr, workspace_bytes,
                              _stream_handle(stream, framework, device)))


def paged_attention(query, key, value, key_cache, value_cache, cumulative_sequence_length,
                    past_seqlens, block_table, cos_cache=None, sin_cache=None, slot_mapping=None,
                    head_sink=None, q_norm_weight=None, k_norm_weight=None, k_scale=None,
                    v_scale=None, attention_metadata=None, query_positions=None,
                    attention_bias=None, *, num_heads, kv_num_heads, scale=0.0, softcap=0.0,
                    local_window_size=-1, do_rotary=0, rotary_interleaved=0, qk_norm_epsilon=1e-6,
                    k_quant_type="NONE", v_quant_type="NONE", k_cache_dtype="", v_cache_dtype="",
                    v_head_size=0, rotary_offset=0, kv_cache_layout="SEPARATE", qk_output=0,
                    is_causal=1, backend="auto", output_qk=None, stream=None,
                    contract_check=False):
    """Runs the operator; returns output, or (output, output_qk) when qk_output != 0.

    key_cache / value_cache are updated in place. `backend`: "auto", "reference", "decode",
    "prefill", "unfused" or "latent". `output_qk`: a preallocated (num_heads, token_count, C) array,
    or None to allocate one with C = block_table.shape[1] * block_size. `attention_metadata`: two
    host ints (replay-wide bounds). `stream` (CUDA only): a stream object or handle to use instead of
    the framework's current stream. `contract_check` (CUDA only): run the device contract checker
    (as PA_CHECK=1 does); check_status() reads what it found. Raises pagedattn.Error.
    """
    kw = dict(num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale, softcap=softcap,
              local_window_size=local_window_size, do_rotary=do_rotary,
              rotary_interleaved=rotary_interleaved, qk_norm_epsilon=qk_norm_epsilon,
              k_quant_type=k_quant_type, v_quant_type=v_quant_type, k_cache_dtype=k_cache_dtype,
              v_cache_dtype=v_cache_dtype, v_head_size=v_head_size, rotary_offset=rotary_offset,
              kv_cache_layout=kv_cache_layout, qk_output=qk_output, is_causal=is_causal)
    kw = _checked_attributes(kw)
    qk_output = kw["qk_output"]
    if not isinstance(backend, str) or backend not in C.BACKENDS:
        raise _argument_error("backend: expected one of %s, got %r"
                              % (", ".join(C.BACKENDS), backend))
    if query is None or key_cache is None:
        raise _argument_error("%s: required" % ("query" if query is None else "key_cache"))
    tensors = (query, key, value, key_cache, value_cache, cumulative_sequence_length,
               past_seqlens, block_table, cos_cache, sin_cache, slot_mapping, head_sink,
               q_norm_weight, k_norm_weight, k_scale, v_scale, None, query_positions,
               attention_bias)
    arrays, qk_array = _wrap_arrays(tensors, output_qk, k_cache_dtype, v_cache_dtype)
    for name, arr in (("key_cache", arrays[C.PA_IN_KEY_CACHE]),
                      ("value_cache", arrays[C.PA_IN_VALUE_CACHE]), ("output_qk", qk_array)):
        if arr is not None and not arr.writable:
            raise _argument_error("%s: expected a writable array (the call writes it in place), "
                                  "got a read-only one" % name)
    metadata = _metadata_values(attention_metadata)
    q = arrays[0]
    framework = _arrays.cuda_framework(q) if q.is_cuda else None
    device = C.PA_DEVICE_HOST
    if q.is_cuda:
        if backend == "reference":
            raise _argument_error("backend: \"reference\" runs on host arrays; pass host copies "
                                  "(numpy or CPU torch) to run the reference executor")
        device = next((a.device for a in arrays + [qk_array] if a is not None and a.device >= 0),
                      -1)
        if device < 0:
            device = _current_device(framework)

    in_descs = C.InputDescs()
    for i, arr in enumerate(arrays):
        if arr is not None:
            _describe(in_descs[i], arr)
    options = C.PlanOptions()
    C.library().pa_plan_options_init(ctypes.byref(options))
    options.device, options.backend = device, C.BACKENDS[backend]
    options.contract_check = 1 if contract_check else 0
    if metadata is not None:
        meta = in_descs[C.PA_IN_ATTENTION_METADATA]
        meta.dtype, meta.rank, meta.dims[0] = C.PA_DTYPE_INT32, 1, 2
        options.attention_metadata = (ctypes.c_int32 * 2)(*metadata)
    out_descs = _output_descs(arrays, qk_array, kw)
    attrs = _attributes(kw)
    key = (tuple(getattr(attrs, f) for f, _ in C.Attributes._fields_),
           tuple((d.dtype, d.rank, tuple(d.dims)) for d in in_descs),
           tuple((d.dtype, d.rank, tuple(d.dims)) for d in out_descs),
           device, backend, metadata, bool(contract_check), os.environ.get("PA_CHECK") == "1")
    plan = _cached_plan(key, attrs, in_descs, out_descs, options)

    out_desc = out_descs[C.PA_OUT_OUTPUT]
    output = _arrays.empty(q, tuple(out_desc.dims[:2]), q.dtype)
    if qk_output != 0 and qk_array is None:
        output_qk = _arrays.empty(q, tuple(out_descs[C.PA_OUT_QK].dims[:3]), C.PA_DTYPE_FLOAT32)
        qk_array = _arrays.wrap("output_qk", output_qk)
    _execute(plan, arrays, _arrays.wrap("output", output),
             qk_array if qk_output != 0 else None, framework, device, stream)
    if qk_output != 0:
        return output, qk_array.obj
    return output
