"""ctypes declarations of include/pagedattn/pagedattn.h and the search for libpagedattn.so."""
import ctypes
import os

# pa_status values (the header's enum).
PA_SUCCESS = 0
PA_ERROR_INVALID_ARGUMENT = 1000
PA_ERROR_CONTRACT_VIOLATION = 1003

# pa_dtype values.
PA_DTYPE_UNDEFINED = 0
PA_DTYPE_FLOAT32 = 1
PA_DTYPE_FLOAT16 = 2
PA_DTYPE_BFLOAT16 = 3
PA_DTYPE_INT8 = 4
PA_DTYPE_FLOAT8_E4M3FN = 5
PA_DTYPE_INT32 = 6
PA_DTYPE_UINT8 = 7

PA_NUM_INPUTS = 19
PA_NUM_OUTPUTS = 4
PA_IN_KEY_CACHE = 3
PA_IN_VALUE_CACHE = 4
PA_IN_ATTENTION_METADATA = 16
PA_OUT_OUTPUT, PA_OUT_KEY_CACHE, PA_OUT_VALUE_CACHE, PA_OUT_QK = 0, 1, 2, 3

PA_DEVICE_CURRENT = -1
PA_DEVICE_HOST = -2
PA_WORKSPACE_ALIGNMENT = 256
PA_CHECK_STATUS_BYTES = 256

BACKENDS = {"auto": 0, "reference": 1, "decode": 2, "prefill": 3, "unfused": 4, "latent": 5}

INPUT_NAMES = (
    "query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length",
    "past_seqlens", "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink",
    "q_norm_weight", "k_norm_weight", "k_scale", "v_scale", "attention_metadata",
    "query_positions", "attention_bias")


class TensorDesc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * 4)]


class Attributes(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_heads", ctypes.c_int32), ("kv_num_heads", ctypes.c_int32),
        ("scale", ctypes.c_float), ("softcap", ctypes.c_float),
        ("local_window_size", ctypes.c_int32), ("do_rotary", ctypes.c_int32),
        ("rotary_interleaved", ctypes.c_int32), ("qk_norm_epsilon", ctypes.c_float),
        ("k_quant_type", ctypes.c_int), ("v_quant_type", ctypes.c_int),
        ("k_cache_dtype", ctypes.c_int), ("v_cache_dtype", ctypes.c_int),
        ("v_head_size", ctypes.c_int32), ("rotary_offset", ctypes.c_int32),
        ("kv_cache_layout", ctypes.c_int), ("qk_output", ctypes.c_int32),
        ("is_causal", ctypes.c_int32),
    ]


class PlanOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("device", ctypes.c_int32), ("backend", ctypes.c_int),
        ("attention_metadata", ctypes.POINTER(ctypes.c_int32)),
        ("max_output_qk_bytes", ctypes.c_uint64), ("device_caps", ctypes.c_void_p),
        ("contract_check", ctypes.c_int32),
    ]


InputDescs = TensorDesc * PA_NUM_INPUTS
OutputDescs = TensorDesc * PA_NUM_OUTPUTS
InputPtrs = ctypes.c_void_p * PA_NUM_INPUTS
OutputPtrs = ctypes.c_void_p * PA_NUM_OUTPUTS


def _candidate_paths():
    """Where the library may be, in the order the binding tries them (doc/python.md):
    1. PAGEDATTN_LIBRARY, when set: that file and nothing else;
    2. the library installed with the package: beside these files (a wheel from `pip install .`),
       or the libdir that `meson install` recorded in _config.py;
    3. `build/libpagedattn.so` of the source checkout this package lies in (python/pagedattn)."""
    env = os.environ.get("PAGEDATTN_LIBRARY")
    if env:
        yield env
        return
    package_dir = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(package_dir, "libpagedattn.so")
    try:
        from ._config import LIBDIR  # written by meson at install time ("" in a wheel)
    except ImportError:  # not installed: the package folder of a source checkout
        yield os.path.join(os.path.dirname(os.path.dirname(package_dir)), "build",
                           "libpagedattn.so")
        return
    if LIBDIR:
        yield os.path.join(LIBDIR, "libpagedattn.so.0")


def _declare(lib):
    c = ctypes
    lib.pa_status_string.argtypes = [c.c_int]
    lib.pa_status_string.restype = c.c_char_p
    lib.pa_last_error_message.argtypes = [c.c_char_p, c.c_size_t]
    lib.pa_last_error_message.restype = c.c_size_t
    lib.pa_attributes_init.argtypes = [c.POINTER(Attributes)]
    lib.pa_attributes_init.restype = None
    lib.pa_plan_options_init.argtypes = [c.POINTER(PlanOptions)]
    lib.pa_plan_options_init.restype = None
    for parse in ("pa_cache_dtype_parse", "pa_quant_type_parse", "pa_kv_cache_layout_parse"):
        fn = getattr(lib, parse)
        fn.argtypes = [c.c_char_p, c.POINTER(c.c_int)]
        fn.restype = c.c_int
    lib.pa_plan_create.argtypes = [c.POINTER(c.c_void_p), c.POINTER(Attributes), InputDescs,
                                   OutputDescs, c.POINTER(PlanOptions)]
    lib.pa_plan_create.restype = c.c_int
    lib.pa_plan_destroy.argtypes = [c.c_void_p]
    lib.pa_plan_destroy.restype = None
    lib.pa_plan_workspace_size.argtypes = [c.c_void_p]
    lib.pa_plan_workspace_size.restype = c.c_size_t
    lib.pa_plan_backend.argtypes = [c.c_void_p]
    lib.pa_plan_backend.restype = c.c_int
    lib.pa_backend_name.argtypes = [c.c_int]
    lib.pa_backend_name.restype = c.c_char_p
    lib.pa_execute.argtypes = [c.c_void_p, InputPtrs, OutputPtrs, c.c_void_p, c.c_size_t,
                               c.c_void_p]
    lib.pa_execute.restype = c.c_int
    lib.pa_execute_reference.argtypes = [c.c_void_p, InputPtrs, OutputPtrs]
    lib.pa_execute_reference.restype = c.c_int
    lib.pa_plan_contract_check.argtypes = [c.c_void_p]
    lib.pa_plan_contract_check.restype = c.c_int
    lib.pa_plan_check_status.argtypes = [c.c_void_p, c.c_void_p, c.c_void_p, c.c_char_p,
                                         c.c_size_t]
    lib.pa_plan_check_status.restype = c.c_int
    return lib


_lib = None


def library():
    """The loaded libpagedattn (found on first use)."""
    global _lib
    if _lib is None:
        tried = []
        for path in _candidate_paths():
            if not os.path.exists(path):
                tried.append("%s (no such file)" % path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise ImportError("pagedattn: cannot load %s: %s" % (path, e)) from None
            _lib = _declare(lib)
            _lib.path = path
            break
        if _lib is None:
            raise ImportError("pagedattn: libpagedattn.so not found; install the package with "
                              "`pip install .`, build the checkout into build/, or set "
                              "PAGEDATTN_LIBRARY. Tried: " + "; ".join(tried))
    return _lib


def status_name(status):
    return library().pa_status_string(status).decode()


def last_error_message():
    lib = library()
    size = lib.pa_last_error_message(None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    lib.pa_last_error_message(buf, size + 1)
    return buf.value.decode(errors="replace")
