"""What the binding needs to know about an array from numpy, torch, cupy or any object with
__cuda_array_interface__: element type, shape, address, device, contiguity; and how to make a new
one of the same kind."""
import math

from . import _capi as C

_DTYPE_BY_NAME = {
    "float32": C.PA_DTYPE_FLOAT32, "float16": C.PA_DTYPE_FLOAT16, "bfloat16": C.PA_DTYPE_BFLOAT16,
    "int8": C.PA_DTYPE_INT8, "float8_e4m3fn": C.PA_DTYPE_FLOAT8_E4M3FN, "int32": C.PA_DTYPE_INT32,
    "uint8": C.PA_DTYPE_UINT8,
}
_NAME_BY_DTYPE = {v: k for k, v in _DTYPE_BY_NAME.items()}
_DTYPE_BY_TYPESTR = {"f4": C.PA_DTYPE_FLOAT32, "f2": C.PA_DTYPE_FLOAT16, "i1": C.PA_DTYPE_INT8,
                     "i4": C.PA_DTYPE_INT32, "u1": C.PA_DTYPE_UINT8}
_ITEMSIZE = {C.PA_DTYPE_FLOAT32: 4, C.PA_DTYPE_FLOAT16: 2, C.PA_DTYPE_BFLOAT16: 2,
             C.PA_DTYPE_INT8: 1, C.PA_DTYPE_FLOAT8_E4M3FN: 1, C.PA_DTYPE_INT32: 4,
             C.PA_DTYPE_UINT8: 1}


# Inputs whose only element type is int32 (validation rules V09-V11, V16, V26).
INT32_ARGUMENTS = ("cumulative_sequence_length", "past_seqlens", "block_table", "slot_mapping",
                   "query_positions")


class ArgumentError(Exception):
    """An input the binding cannot pass to the library; turned into pagedattn.Error."""


class Array:
    """kind: "numpy", "torch", "cupy" or "cai"; device: None on the host, else a CUDA ordinal
    (-1 when an interface-only object does not say which)."""

    __slots__ = ("obj", "kind", "dtype", "shape", "ptr", "device", "contiguous", "writable")

    def __init__(self, obj, kind, dtype, shape, ptr, device, contiguous, writable=True):
        self.obj, self.kind, self.dtype, self.shape = obj, kind, dtype, tuple(int(d) for d in shape)
        self.ptr, self.device, self.contiguous, self.writable = ptr, device, contiguous, writable

    @property
    def is_cuda(self):
        return self.device is not None

    @property
    def size(self):
        return math.prod(self.shape)


def _module_name(obj):
    return type(obj).__module__.split(".")[0]


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def wrap(name, obj):
    """Describe obj, raising ArgumentError naming the argument when it is not a usable array."""
    module = _module_name(obj)
    if module == "torch":
        dtype = _DTYPE_BY_NAME.get(str(obj.dtype).replace("torch.", ""))
        device = obj.device.index if obj.device.type == "cuda" else None
        if obj.device.type not in ("cpu", "cuda"):
            raise ArgumentError("%s: expected a CPU or CUDA tensor, got device %s" % (name, obj.device))
        arr = Array(obj, "torch", dtype, obj.shape, obj.data_ptr(), device, obj.is_contiguous())
        if arr.is_cuda and device is None:
            arr.device = -1
    elif module == "numpy":
        import numpy as np
        if not isinstance(obj, np.ndarray):
            raise ArgumentError("%s: expected an array (numpy.ndarray, torch.Tensor or a CUDA "
                                "array), got %s.%s; wrap it with numpy.asarray"
                                % (name, module, type(obj).__name__))
        dtype = _DTYPE_BY_NAME.get(obj.dtype.name)
        arr = Array(obj, "numpy", dtype, obj.shape, obj.ctypes.data, None,
                    obj.flags["C_CONTIGUOUS"], bool(obj.flags.writeable))
    elif module == "cupy":
        dtype = _DTYPE_BY_NAME.get(obj.dtype.name)
        arr = Array(obj, "cupy", dtype, obj.shape, obj.data.ptr, obj.device.id,
                    obj.flags.c_contiguous)
    elif hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        dtype = _DTYPE_BY_TYPESTR.get(cai["typestr"][1:])
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        contiguous = strides is None or tuple(strides) == _c_strides(shape, int(cai["typestr"][2:]))
        arr = Array(obj, "cai", dtype, shape, cai["data"][0] or 0, -1, contiguous,
                    not cai["data"][1])
    elif hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        raise ArgumentError("%s: expected a numpy array, a torch tensor or a CUDA array, got %s; "
                            "convert it with numpy.asarray" % (name, type(obj).__name__))
    else:
        raise ArgumentError("%s: expected an array, got %s" % (name, type(obj).__name__))
    if arr.dtype is None and name in INT32_ARGUMENTS:
        raise ArgumentError("%s: expected dtype int32, got %s (numpy's default integer is int64: "
                            "make it with dtype=numpy.int32)" % (name, getattr(obj, "dtype", None)))
    if arr.dtype is None:
        raise ArgumentError("%s: unsupported element type %s (expected one of float32, float16, "
                            "bfloat16, int8, float8_e4m3fn, int32, uint8)"
                            % (name, getattr(obj, "dtype", None)))
    if len(arr.shape) > 4:
        raise ArgumentError("%s: rank must be at most 4, got %d" % (name, len(arr.shape)))
    if not arr.contiguous:
        raise ArgumentError("%s: must be C-contiguous (row-major, dense)" % name)
    return arr


def _numpy_dtype(dtype):
    import numpy as np
    name = _NAME_BY_DTYPE[dtype]
    if name in ("bfloat16", "float8_e4m3fn"):
        try:
            import ml_dtypes
        except ImportError:
            raise ArgumentError("%s on numpy needs the ml_dtypes package" % name) from None
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _torch_dtype(dtype):
    import torch
    return getattr(torch, _NAME_BY_DTYPE[dtype])


def cuda_framework(like):
    """The framework that allocates for a CUDA call: the one of `like`, or torch, or cupy."""
    if like.kind in ("torch", "cupy"):
        return like.kind
    for module in ("torch", "cupy"):
        try:
            __import__(module)
            return module
        except ImportError:
            pass
    raise ArgumentError("%s: a CUDA array that is neither torch nor cupy needs torch or cupy "
                        "installed to allocate outputs and workspace" % "query")


def empty(like, shape, dtype):
    """A new array of `like`'s kind and device."""
    if like.kind == "numpy":
        import numpy as np
        return np.empty(shape, dtype=_numpy_dtype(dtype))
    framework = cuda_framework(like) if like.is_cuda else like.kind
    if framework == "torch":
        import torch
        device = "cpu" if not like.is_cuda else (
            torch.device("cuda", like.device) if like.device >= 0 else torch.device("cuda"))
        return torch.empty(shape, dtype=_torch_dtype(dtype), device=device)
    import cupy
    if dtype not in (C.PA_DTYPE_FLOAT32, C.PA_DTYPE_FLOAT16, C.PA_DTYPE_INT8, C.PA_DTYPE_INT32,
                     C.PA_DTYPE_UINT8):
        raise ArgumentError("cupy has no %s arrays" % _NAME_BY_DTYPE[dtype])
    if like.device is not None and like.device >= 0:
        with cupy.cuda.Device(like.device):
            return cupy.empty(shape, dtype=_NAME_BY_DTYPE[dtype])
    return cupy.empty(shape, dtype=_NAME_BY_DTYPE[dtype])


def itemsize(dtype):
    return _ITEMSIZE[dtype]
