"""ctypes binding of kgen's C API (include/kgen/c_api.h): library lookup, DLPack structs, calls.

The shared library is found and loaded on first use, never at import, so `import kgen` works on
a machine without a GPU or a build. Every C function is declared once in `_SIGNATURES`; `call`
turns a non-OK status into a KgenError carrying the library's own message.
"""
from __future__ import annotations

import ctypes
import enum
import os
import sys
import struct
import threading
from pathlib import Path
from typing import Sequence

# --- DLPack 0.6 (dlpack/dlpack.h) -------------------------------------------------------------

kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM, kDLExtDev = 1, 2, 3, 10, 12  # DLDeviceType
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex = 0, 1, 2, 4, 5  # DLDataTypeCode
kDLFloat8_e4m3fn = 10  # DLPack 1.1's OCP FP8 E4M3 (torch.float8_e4m3fn)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements, not bytes
        ("byte_offset", ctypes.c_uint64),
    ]


# DLTensor, then its shape and stride arrays, packed in one buffer (48 + 16·ndim bytes).
_PACKED = {ndim: struct.Struct(f"<QiiiBBHQQQ{ndim}q{ndim}q") for ndim in range(9)}


def dltensor(data: int | None, shape: Sequence[int], strides: Sequence[int],
             dtype: tuple[int, int], device: tuple[int, int]) -> DLTensor:
    """The one DLTensor builder: `data` is the address of element [0, ..., 0], `strides` are in
    elements, `dtype` is (DLDataTypeCode, bits), `device` is (DLDeviceType, index). The struct and
    its shape and stride arrays share one buffer that the returned struct keeps alive; packing it
    in one call costs half of filling the ctypes fields one by one (it runs for every tensor of
    every call)."""
    ndim = len(shape)
    layout = _PACKED.get(ndim) or struct.Struct(f"<QiiiBBHQQQ{ndim}q{ndim}q")
    buf = bytearray(layout.size)
    t = DLTensor.from_buffer(buf)
    arrays = ctypes.addressof(t) + ctypes.sizeof(DLTensor)
    layout.pack_into(buf, 0, data or 0, device[0], device[1], ndim, dtype[0], dtype[1], 1, arrays, arrays + 8 * ndim, 0,
                     *shape, *strides)
    return t


def ref(t: DLTensor | None):
    """A `const DLTensor*` argument: NULL for None."""
    return None if t is None else ctypes.byref(t)


# --- kgen types -------------------------------------------------------------------------------

class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    NO_DEVICE = 2
    COMPILE = 3
    CUDA = 4
    CACHE = 5
    INTERNAL = 6


class AttentionOptions(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_double), ("causal", ctypes.c_int)]


class AttentionBackwardOptions(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_double), ("causal", ctypes.c_int), ("deterministic", ctypes.c_int),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t), ("config", ctypes.c_char_p)]


class LrpeOptions(ctypes.Structure):
    """kgen_lrpe_options of c_api.h."""
    _fields_ = [("act", ctypes.c_int), ("offset", ctypes.c_int64), ("dims", ctypes.c_int),
                ("grid", ctypes.c_int64 * 3), ("extra", ctypes.c_int), ("config", ctypes.c_char_p),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


class VariantScalar(ctypes.Structure):
    """kgen_variant_scalar of c_api.h."""
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double), ("integer", ctypes.c_int)]


class VariantTensor(ctypes.Structure):
    """kgen_variant_tensor of c_api.h."""
    _fields_ = [("name", ctypes.c_char_p), ("tensor", ctypes.c_void_p), ("learnable", ctypes.c_int),
                ("grad", ctypes.c_void_p)]


class AttentionVariant(ctypes.Structure):
    """kgen_attention_variant of c_api.h. A fresh one is plain attention (what
    kgen_attention_variant_init sets): window -1/-1, prefix -1, the rest 0 or NULL."""
    _fields_ = [("causal_top_left", ctypes.c_int), ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("softcap", ctypes.c_double), ("alibi_slopes", ctypes.c_void_p), ("prefix", ctypes.c_int),
                ("chunk", ctypes.c_int), ("document_ids", ctypes.c_void_p), ("sinks", ctypes.c_void_p),
                ("sinks_grad", ctypes.c_void_p), ("score_mod", ctypes.c_char_p), ("mask_mod", ctypes.c_char_p),
                ("scalars", ctypes.c_void_p), ("num_scalars", ctypes.c_int), ("tensors", ctypes.c_void_p),
                ("num_tensors", ctypes.c_int)]

    def __init__(self, **fields):
        super().__init__(**{"window_left": -1, "window_right": -1, "prefix": -1, **fields})


class PackedSequences(ctypes.Structure):
    """kgen_packed_sequences of c_api.h."""
    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p), ("max_seqlen_q", ctypes.c_int),
                ("max_seqlen_k", ctypes.c_int)]


class PagedKV(ctypes.Structure):
    """kgen_paged_kv of c_api.h."""
    _fields_ = [("block_table", ctypes.c_void_p), ("cache_seqlens", ctypes.c_void_p)]


class Rotary(ctypes.Structure):
    """kgen_rotary of c_api.h."""
    _fields_ = [("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p), ("interleaved", ctypes.c_int),
                ("q_sequential", ctypes.c_int)]


# kgen_lrpe_act codes
LRPE_ACTS = {"none": 0, "relu": 1, "sigmoid": 2, "silu": 3, "softmax": 4, "softmax_seq": 5}


class KgenError(RuntimeError):
    """A failed kgen call. `status` is the C API's Status (None when the library could not be
    loaded); str(error) is the library's message, unchanged."""

    def __init__(self, message: str, status: Status | None = None):
        super().__init__(message)
        self.status = status


# Every pointer parameter is declared void*: the hot path passes the addresses of descriptors it
# packed itself (Frame) as plain ints, and byref() arguments are accepted as well.
_P, _SIZE = ctypes.c_void_p, ctypes.c_void_p
_SIGNATURES = {  # name: (restype, argtypes)
    "kgen_attention_forward": (ctypes.c_int, [_P] * 7),
    "kgen_attention_forward_variant": (ctypes.c_int, [_P] * 8),
    "kgen_attention_forward_fp8": (ctypes.c_int, [_P] * 11),
    "kgen_attention_variant_init": (None, [_P]),
    "kgen_attention_varlen_forward": (ctypes.c_int, [_P] * 9),
    "kgen_attention_varlen_backward": (ctypes.c_int, [_P] * 13),
    "kgen_attention_varlen_double_backward": (ctypes.c_int, [_P] * 17),
    "kgen_attention_paged_forward": (ctypes.c_int, [_P] * 9),
    "kgen_attention_paged_append": (ctypes.c_int, [_P] * 9),
    "kgen_attention_paged_plan": (ctypes.c_int, [_P] * 9),
    "kgen_paged_plan_info": (ctypes.c_int, [_P] * 4),
    "kgen_attention_paged_run": (ctypes.c_int, [_P] * 8 + [ctypes.c_size_t, _P]),
    "kgen_paged_plan_destroy": (None, [_P]),
    "kgen_attention_backward": (ctypes.c_int, [_P] * 11),
    "kgen_attention_backward_variant": (ctypes.c_int, [_P] * 12),
    "kgen_attention_double_backward": (ctypes.c_int, [_P] * 15),
    "kgen_attention_double_backward_variant": (ctypes.c_int, [_P] * 16),
    "kgen_attention_backward_workspace_bytes": (ctypes.c_int, [_P, _P, ctypes.c_int, _SIZE]),
    "kgen_attention_varlen_backward_workspace_bytes": (ctypes.c_int, [_P, _P, _SIZE]),
    "kgen_lrpe_workspace_bytes": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, _SIZE]),
    "kgen_lrpe_cosine_forward": (ctypes.c_int, [_P] * 5),
    "kgen_lrpe_cosine_backward": (ctypes.c_int, [_P] * 6),
    "kgen_md_lrpe_cosine_forward": (ctypes.c_int, [_P] * 6),
    "kgen_md_lrpe_cosine_backward": (ctypes.c_int, [_P] * 7),
    "kgen_validate_only": (ctypes.c_int, [ctypes.c_int]),
    "kgen_last_error": (ctypes.c_char_p, []),
    "kgen_version": (ctypes.c_char_p, []),
}

# --- library lookup -----------------------------------------------------------------------------

_REPO = Path(__file__).resolve().parents[2]
_NAME = "libkgen.so"
CANDIDATES = (
    Path(__file__).resolve().parent / _NAME,  # a wheel that bundles the library
    _REPO / "build" / "lib" / _NAME,
    _REPO / "build" / _NAME,
    _REPO / "dist" / "lib" / _NAME,
)

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: str | None = None
_functions: dict = {}  # name: the declared ctypes function, filled when the library loads


def find_library() -> str | None:
    """$KGEN_LIBRARY if set (even if missing: no silent fallback), else the first build found."""
    env = os.environ.get("KGEN_LIBRARY")
    if env:
        return env
    return next((str(p) for p in CANDIDATES if p.is_file()), None)


# Where the NVIDIA wheels that pip-installed PyTorch brings keep NVRTC, under a `nvidia` package
# directory on sys.path: CUDA 13's nvidia-cuda-nvrtc (cu13/lib) and CUDA 12's
# nvidia-cuda-nvrtc-cu12 (cuda_nvrtc/lib), newest major first.
_WHEEL_NVRTC = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12",
                "cu12/lib/libnvrtc.so.12")


def wheel_nvrtc(search_path=None) -> str | None:
    """libnvrtc from the pip-installed NVIDIA wheels on `search_path` (sys.path), or None."""
    roots = [Path(p) / "nvidia" for p in (sys.path if search_path is None else search_path) if p]
    for name in _WHEEL_NVRTC:
        for root in roots:
            candidate = root / name
            if candidate.is_file():
                return str(candidate)
    return None


def system_nvrtc() -> bool:
    """Whether the library's own NVRTC lookup (the loader's path, $CUDA_HOME/lib64,
    /usr/local/cuda/lib64) has something to find."""
    import ctypes.util
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    if any(h and any((Path(h) / "lib64" / f"libnvrtc.so.{m}").is_file() for m in (13, 12)) for h in homes):
        return True
    return ctypes.util.find_library("nvrtc") is not None


def point_at_wheel_nvrtc() -> str | None:
    """Without KGEN_NVRTC_PATH and a toolkit's NVRTC, points KGEN_NVRTC_PATH at the NVRTC of the
    pip-installed NVIDIA wheels (what PyTorch's wheels bring), so that kgen needs no CUDA toolkit
    beside them. Returns the path set, or None."""
    if os.environ.get("KGEN_NVRTC_PATH") or system_nvrtc():
        return None
    found = wheel_nvrtc()
    if found:
        os.environ["KGEN_NVRTC_PATH"] = found
    return found


def library() -> ctypes.CDLL:
    """The loaded library with every signature declared; raises KgenError if it cannot load."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            point_at_wheel_nvrtc()
            path = find_library()
            if path is None:
                searched = ", ".join(str(p) for p in CANDIDATES)
                raise KgenError(f"{_NAME} not found: set KGEN_LIBRARY to its path or build kgen "
                                f"with CMake into {_REPO / 'build'} (searched {searched})")
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise KgenError(f"cannot load {path}"
                                f"{' (from KGEN_LIBRARY)' if os.environ.get('KGEN_LIBRARY') else ''}"
                                f": {e}") from e
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
                _functions[name] = fn
            _lib, _path = lib, path
    return _lib


def library_path() -> str | None:
    """Path of the loaded library (loading it if needed), or None if none can be loaded."""
    try:
        library()
    except KgenError:
        return None
    return _path


def last_error() -> str:
    return (library().kgen_last_error() or b"").decode("utf-8", "replace")


def version() -> str:
    return library().kgen_version().decode()


def function(name: str):
    """The ctypes function `name` of _SIGNATURES (loading the library on first use)."""
    fn = _functions.get(name)
    if fn is None:
        library()
        fn = _functions[name]
    return fn


def raise_error(name: str, status: int):
    """Raise the KgenError of a non-OK `status` that `name` just returned, with kgen_last_error()'s
    message (read on the same thread right away, as the C API requires)."""
    try:
        status = Status(status)
    except ValueError:
        pass
    raise KgenError(last_error() or f"{name} failed with status {int(status)}", status)


def call(name: str, *args) -> None:
    """Call C function `name`; a non-OK status raises KgenError with the library's message."""
    status = function(name)(*args)
    if status != Status.OK:
        raise_error(name, status)


# --- one call's arguments in one buffer ---------------------------------------------------------------

# struct formats of the options structs (c_api.h), with the C padding spelled out; tests check
# them against the ctypes Structures above.
ATTENTION_OPTIONS = "di4x"  # kgen_attention_options
ATTENTION_BACKWARD_OPTIONS = "diiQQQ"  # kgen_attention_backward_options
LRPE_OPTIONS = "i4xqi4x3qi4xQQQ"  # kgen_lrpe_options
_HEADER = "QiiiBBHQQQ"  # DLTensor without its shape and stride arrays (48 bytes)


class Frame:
    """The arguments of one C call in one buffer: the options struct, then per tensor argument a
    DLTensor followed by its shape and stride arrays. `pack` fills it with one struct.pack_into;
    the buffer is reused by every call of the same form on the thread (the library reads the
    descriptors only during the call). At a decode shape this costs a third of building ctypes
    structures tensor by tensor."""

    def __init__(self, options_format: str, ndims: tuple):
        fmt = "<" + options_format + "".join(f"{_HEADER}{n}q{n}q" for n in ndims if n is not None)
        self.struct = struct.Struct(fmt)
        self.buffer = ctypes.create_string_buffer(self.struct.size)
        self.options = ctypes.addressof(self.buffer)
        offset = self.options + struct.calcsize("<" + options_format)
        # per tensor argument: (address of its DLTensor, of its shape array, of its stride array)
        self.tensors = []
        for n in ndims:
            if n is None:
                self.tensors.append(None)
                continue
            shape = offset + ctypes.sizeof(DLTensor)
            self.tensors.append((offset, shape, shape + 8 * n))
            offset = shape + 16 * n

    def pack(self, values) -> None:
        self.struct.pack_into(self.buffer, 0, *values)


_frames = threading.local()


def frame(options_format: str, ndims: tuple) -> Frame:
    """This thread's Frame for calls with these options and tensor ranks (None: a NULL tensor)."""
    cache = getattr(_frames, "cache", None)
    if cache is None:
        cache = _frames.cache = {}
    key = (options_format, ndims)
    f = cache.get(key)
    if f is None:
        f = cache[key] = Frame(options_format, ndims)
    return f


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def capsule_address(capsule) -> int:
    """Address of the DLTensor of an unversioned DLPack capsule (named "dltensor": DLManagedTensor
    starts with its DLTensor); the capsule owns it."""
    return _capsule_pointer(capsule, b"dltensor")


_strings: dict = {}


def c_string(text: str | None) -> int:
    """Address of a NUL-terminated copy of `text` that lives as long as the process (configs are
    few), or 0 for None or ""."""
    if not text:
        return 0
    buf = _strings.get(text)
    if buf is None:
        buf = _strings[text] = ctypes.create_string_buffer(text.encode())
    return ctypes.addressof(buf)
