"""How kgen's C library sees a torch tensor, and the fake kernels' question to the library.

The fake (meta) implementations of torch.ops.kgen.* run where no kernel runs: at trace time
under torch.compile and in FakeTensorMode. They raise the KgenError the library would raise for
the same call, with the same sentence, by asking the library itself: `validate` calls the
operator's own C function on the descriptors a launch would pass, in validate-only mode
(kgen_validate_only in c_api.h), where the library converts and checks them exactly as a launch
does and returns before any device work, so this works without a GPU. A tensor without storage
has no data pointer: its descriptor carries a made-up address (aligned, never read).

What stays in Python, and why: how a torch tensor is described to the library (dl_dtype,
dl_device, which the kernels use too); the Variant tuple, the operators' form of a variant; the
argument forms that never reach the library as such (layout and act names, scale None, the
variant's lists pairing up: _kernels.py), and the FP8 forward's keyword rules (kgen.torch). What
needs a device (a config against the device's target, workspace sizes, KGEN_CHECK_INDICES' reads)
the library checks when the call runs. Sizes that are symbolic (torch.compile with dynamic
shapes) are checked at the traced example's values, adding no guard; without such values
(unbacked sizes) the check waits for the call. tests/test_checks.py compares the fake kernels'
sentences with the library's own.
"""
from __future__ import annotations

import ctypes
import warnings
from typing import NamedTuple, Sequence

import torch

from . import _lib
from ._lib import KgenError, Status


def dl_dtype(dtype: torch.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a torch dtype as PyTorch's own DLPack export gives it (bool is
    kDLBool, each float8 its own code), so that every path describes a tensor alike; the library
    decides which ones it supports."""
    codes = _DL_DTYPES.get(dtype)
    return codes if codes is not None else _dtype_rule(dtype)


def _exported_dtype(dtype: torch.dtype) -> tuple[int, int] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
            capsule = torch._C._to_dlpack(torch.empty(1, dtype=dtype, device="cpu"))  # owns the DLTensor read below
        t = _lib.DLTensor.from_address(_lib.capsule_address(capsule))
        return t.dtype.code, t.dtype.bits
    except Exception:  # noqa: BLE001 - a dtype DLPack cannot describe, or a PyTorch without the export
        return None


def _dtype_rule(dtype: torch.dtype) -> tuple[int, int]:
    if dtype == getattr(torch, "float8_e4m3fn", None):
        return _lib.kDLFloat8_e4m3fn, 8
    if dtype == torch.bfloat16:
        code = _lib.kDLBfloat
    elif dtype.is_complex:
        code = _lib.kDLComplex
    elif dtype.is_floating_point:
        code = _lib.kDLFloat
    else:
        code = _lib.kDLInt if dtype.is_signed else _lib.kDLUInt
    return code, dtype.itemsize * 8


# Read once, at import (outside any fake or dispatch mode a later call may run under).
_DL_DTYPES = {d: codes for d in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
              if (codes := _exported_dtype(d)) is not None}

DL_CUDA = _lib.kDLROCM if torch.version.hip else _lib.kDLCUDA


def dl_device(device: torch.device) -> tuple[int, int]:
    """(DLDeviceType, index). A meta tensor stands for device memory: it is what a traced call
    on CUDA tensors sees."""
    if device.type in ("cuda", "meta"):
        return DL_CUDA, device.index or 0
    if device.type == "cpu":
        return _lib.kDLCPU, 0
    return _lib.kDLExtDev, device.index or 0


def invalid(message: str):
    raise KgenError(message, Status.INVALID_ARGUMENT)


class Variant(NamedTuple):
    """An attention variant as torch.ops.kgen.attention_forward_variant takes it: the fields of
    kgen_attention_variant (c_api.h) in its order, scalars as three lists and tensors as two."""
    causal_top_left: bool = False
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    alibi_slopes: torch.Tensor | None = None
    prefix: int = -1
    chunk: int = 0
    document_ids: torch.Tensor | None = None
    sinks: torch.Tensor | None = None
    score_mod: str | None = None
    mask_mod: str | None = None
    scalar_names: Sequence[str] = ()
    scalar_values: Sequence[float] = ()
    scalar_integer: Sequence[bool] = ()
    tensor_names: Sequence[str] = ()
    tensors: Sequence[torch.Tensor] = ()


# --- the library's own checks ---------------------------------------------------------------------

# The address a descriptor of a tensor without storage carries: not null and aligned as the
# library asks (to the element, and to 16 bytes where a kernel loads 16 bytes); never read.
FAKE_ADDRESS = 1 << 40


class _Unknown(Exception):
    """A symbolic size without a value in the traced example (an unbacked size)."""


def example_int(x) -> int:
    """`x` as an int without a guard: a symbolic size's value in the traced example."""
    if isinstance(x, int):
        return x
    hint = getattr(getattr(x, "node", None), "hint", None)
    if hint is None:
        raise _Unknown
    return int(hint)


def descriptor(t: torch.Tensor, swap: bool = False) -> _lib.DLTensor:
    """The DLTensor a launch would pass for `t` (its (b, h, n, ·) view when 4-d and `swap`), at
    FAKE_ADDRESS plus its storage offset: for tensors without storage (meta, fake)."""
    shape, strides = [example_int(s) for s in t.shape], [example_int(s) for s in t.stride()]
    if swap and len(shape) == 4:
        shape = [shape[0], shape[2], shape[1], shape[3]]
        strides = [strides[0], strides[2], strides[1], strides[3]]
    address = FAKE_ADDRESS + example_int(t.storage_offset()) * t.element_size()
    return _lib.dltensor(address, shape, strides, dl_dtype(t.dtype), dl_device(t.device))


def validate(function: str, tensors, swap, options, extra=None) -> None:
    """C `function(tensors..., &options, extra..., stream)` in validate-only mode: the library's
    own checks of the call, as a launch runs them; a refusal raises its KgenError. `tensors` in
    the function's order (None = NULL), described by `descriptor` with `swap` (one for all, or a
    tuple with one per tensor); `options` the options struct
    (or a function making it, where it holds sizes); `extra()`, if given, builds the arguments
    between the options and the stream as the launch does (its tensors described by
    `descriptor`), returning (arguments, what must live until the call returns)."""
    try:
        swaps = swap if isinstance(swap, tuple) else (swap,) * len(tensors)
        descriptors = [None if t is None else descriptor(t, s) for t, s in zip(tensors, swaps)]
        if callable(options):
            options = options()
        arguments, keep = extra() if extra is not None else ((), None)
    except _Unknown:
        return
    mode = _lib.function("kgen_validate_only")
    previous = mode(1)
    try:
        status = _lib.function(function)(*map(_lib.ref, descriptors), ctypes.byref(options), *arguments, None)
        if status:
            _lib.raise_error(function, status)
    finally:
        mode(previous)
    del keep  # read by the call
