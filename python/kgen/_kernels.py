"""The CUDA kernels of torch.ops.kgen.*: each one allocates its outputs and calls kgen's C function
on the current CUDA stream, its tensors passed zero-copy as DLPack descriptors.

_ops.py registers them with PyTorch's dispatcher, and kgen.torch calls them directly in eager
mode, which saves the dispatcher's few µs per call. Shapes, dtypes, devices and strides are
checked by the library alone (its message names the argument); Python checks only the layout and
act names and the scale. A call goes through its call form (_calls.py): its options and
descriptors (the bnhd layout's as (b, h, n, d) views) packed once per combination of shapes,
strides, dtypes and devices, its scratch size asked once, so that a repeated call writes only its
data pointers. Signatures and conventions: see _ops.py.
"""
from __future__ import annotations

import ctypes

import torch

from . import _calls, _checks, _lib

LAYOUTS = ("bhnd", "bnhd")
LRPE_ACTS = tuple(_lib.LRPE_ACTS)

# --- calling the library ------------------------------------------------------------------------------

# The current stream's handle without building a torch.cuda.Stream object (4 µs per call): the
# raw-stream query PyTorch's own generated code uses, where this PyTorch has it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_to_dlpack = getattr(torch._C, "_to_dlpack", None)


def _exports_dltensors() -> bool:
    """Whether this PyTorch's to_dlpack gives unversioned capsules whose DLTensor views the tensor
    in place (the descriptors the library takes as they are)."""
    try:
        t = torch.empty((2, 3), dtype=torch.float16)[:, 1:]
        capsule = _to_dlpack(t)  # owns the DLTensor read below
        d = _lib.DLTensor.from_address(_lib.capsule_address(capsule))
        return (d.data, d.byte_offset, list(d.shape[:2]), list(d.strides[:2])) == (t.data_ptr(), 0, [2, 2], [3, 1])
    except Exception:  # noqa: BLE001 - no such export here: the descriptors are packed instead
        return False


_EXPORTS_DLTENSORS = _to_dlpack is not None and _exports_dltensors()


def _stream(device: int):
    if device < 0:
        return None
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def _pack(options_format: str, options: tuple, tensors, swap: bool):
    """(frame, tensor addresses, what must live until the call returns) of a call on `tensors`
    (None = NULL): each one's DLTensor views it in place, as its (b, h, n, ·) view if it is 4-d and
    `swap` (layout bnhd). Without a swap the descriptors are PyTorch's own DLPack export (half the
    host time of packing them here at a decode shape)."""
    if not swap and _EXPORTS_DLTENSORS:
        capsules = [None if t is None else _to_dlpack(t) for t in tensors]
        frame = _lib.frame(options_format, ())
        frame.pack(options)
        return frame, [None if c is None else _lib.capsule_address(c) for c in capsules], capsules
    frame = _lib.frame(options_format, tuple([None if t is None else t.dim() for t in tensors]))
    values = list(options)
    addresses = []
    for t, slot in zip(tensors, frame.tensors):
        if t is None:
            addresses.append(None)
            continue
        shape, strides = t.shape, t.stride()
        if swap and len(shape) == 4:
            shape = (shape[0], shape[2], shape[1], shape[3])
            strides = (strides[0], strides[2], strides[1], strides[3])
        dtype = _checks.dl_dtype(t.dtype)
        device = t.get_device()
        device_type = _checks.DL_CUDA if device >= 0 else (_lib.kDLCPU if t.is_cpu else _lib.kDLExtDev)
        values += (t.data_ptr(), device_type, max(device, 0), len(shape), dtype[0], dtype[1], 1, slot[1], slot[2], 0)
        values += shape
        values += strides
        addresses.append(slot[0])
    frame.pack(values)
    return frame, addresses, None


def _launch(function: str, options_format: str, options: tuple, tensors, swap: bool, *extra, scratch=None) -> None:
    """C `function(tensors..., &options, extra..., stream)` on the current stream of the first
    tensor's device, through its call form (_calls.py); `scratch`: see _calls.launch."""
    _calls.launch(function, options_format, options, tensors, swap, *extra, scratch=scratch)


def _swap(layout: str) -> bool:
    if layout == "bhnd":
        return False
    if layout == "bnhd":
        return True
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _scale(scale) -> float:
    """The library's scale option: 0 for None (1/sqrt(d))."""
    if scale is None:
        return 0.0
    if not scale > 0:
        raise ValueError(f"scale must be positive (None means 1/sqrt(d)), got {scale}")
    return float(scale)


def _dense(t):
    """`t` itself when its last dim is contiguous and no stride is 0 (autograd hands out expanded
    zero-stride gradients), else a contiguous copy."""
    if t is None:
        return None
    if t.stride(-1) == 1 and all(s != 0 or n == 1 for s, n in zip(t.stride(), t.shape)):
        return t
    return t.contiguous()


# --- attention ----------------------------------------------------------------------------------------

def _forward_outputs(q, swap: bool, with_lse: bool = True, v=None):
    """o (q's shape with v's head dim, contiguous in q's layout) and lse (float32 (b, h, n_q), or None)."""
    s = q.shape
    o = q.new_empty(s if v is None or v.dim() != len(s) else (*s[:-1], v.shape[-1]))
    if not with_lse:
        return o, None
    rows = (s[0], s[2], s[1]) if swap and len(s) == 4 else s[:-1]
    return o, q.new_empty(rows, dtype=torch.float32)


def attention_forward_out(q, k, v, out, lse, scale=None, causal=False, layout="bhnd"):
    """Writes out (and lse unless None) on the current stream (_calls.forward_out)."""
    _calls.forward_out(q, k, v, out, lse, scale, causal, layout)


def attention_forward(q, k, v, scale=None, causal=False, layout="bhnd", with_lse=True):
    """(o, lse); lse is None unless with_lse (the operator always computes it). Outputs as
    _forward_outputs allocates them (_calls.forward)."""
    return _calls.forward(q, k, v, scale, causal, layout, with_lse)[:2]


# --- attention variants ----------------------------------------------------------------------------

_INT32 = (-(1 << 31), (1 << 31) - 1)
_LIST_FIELDS = ("scalar_names", "scalar_values", "scalar_integer", "tensor_names", "tensors")


def _variant(args: tuple, named: dict) -> _checks.Variant:
    """The variant of an operator call's trailing arguments (positional or by name, as the
    dispatcher passes them), its form checked: the integers fit the C API's int, the scalar and
    tensor lists pair up. The library checks the values."""
    variant = _checks.Variant(*args, **named)
    lists = {f: () for f in _LIST_FIELDS if getattr(variant, f) is None}
    if lists:
        variant = variant._replace(**lists)
    for field in ("window_left", "window_right", "prefix", "chunk"):
        value = getattr(variant, field)
        if not _INT32[0] <= value <= _INT32[1]:
            raise ValueError(f"{field} must fit in int32, got {value}")
    if not len(variant.scalar_names) == len(variant.scalar_values) == len(variant.scalar_integer):
        raise ValueError(f"scalar_names, scalar_values and scalar_integer must have one entry per scalar, got "
                         f"{len(variant.scalar_names)}, {len(variant.scalar_values)} and "
                         f"{len(variant.scalar_integer)}")
    if len(variant.tensor_names) != len(variant.tensors):
        raise ValueError(f"tensor_names and tensors must have one entry per tensor, got {len(variant.tensor_names)} "
                         f"and {len(variant.tensors)}")
    return variant


def _variant_tensor(t, swap: bool = False) -> _lib.DLTensor:
    """The DLTensor of a variant tensor, as given, or as its (b, h, n, d) view when it is 4-d and
    `swap` (layout bnhd)."""
    shape, strides = tuple(t.shape), t.stride()
    if swap and len(shape) == 4:
        shape, strides = (shape[0], shape[2], shape[1], shape[3]), (strides[0], strides[2], strides[1], strides[3])
    device = t.get_device()
    device_type = _checks.DL_CUDA if device >= 0 else (_lib.kDLCPU if t.is_cpu else _lib.kDLExtDev)
    return _lib.dltensor(t.data_ptr(), shape, strides, _checks.dl_dtype(t.dtype), (device_type, max(device, 0)))


def _variant_struct(variant: _checks.Variant, sinks_grad=None, tensor_grads=(), describe=_variant_tensor):
    """(kgen_attention_variant, what must live until the call returns). The backward's gradient
    buffers: sinks_grad, and tensor_grads[i] for variant.tensors[i] (learnable if not None).
    `describe` makes a tensor's DLTensor (_checks.descriptor for tensors without storage)."""
    keep = []

    def address(t):
        if t is None:
            return None
        d = describe(t)
        keep.append(d)
        return ctypes.addressof(d)

    c = _lib.AttentionVariant(causal_top_left=int(variant.causal_top_left), window_left=variant.window_left,
                              window_right=variant.window_right, softcap=float(variant.softcap),
                              alibi_slopes=address(variant.alibi_slopes), prefix=variant.prefix,
                              chunk=variant.chunk, document_ids=address(variant.document_ids),
                              sinks=address(variant.sinks), sinks_grad=address(sinks_grad),
                              score_mod=variant.score_mod.encode() if variant.score_mod else None,
                              mask_mod=variant.mask_mod.encode() if variant.mask_mod else None)
    if variant.scalar_names:
        scalars = (_lib.VariantScalar * len(variant.scalar_names))(
            *[_lib.VariantScalar(name.encode(), float(value), int(bool(integer)))
              for name, value, integer in zip(variant.scalar_names, variant.scalar_values, variant.scalar_integer)])
        keep.append(scalars)
        c.scalars, c.num_scalars = ctypes.addressof(scalars), len(scalars)
    if variant.tensor_names:
        grads = list(tensor_grads) + [None] * (len(variant.tensors) - len(tensor_grads))
        tensors = (_lib.VariantTensor * len(variant.tensor_names))(
            *[_lib.VariantTensor(name.encode(), address(t), int(g is not None), address(g))
              for name, t, g in zip(variant.tensor_names, variant.tensors, grads)])
        keep.append(tensors)
        c.tensors, c.num_tensors = ctypes.addressof(tensors), len(tensors)
    return c, keep


def variant_forward_out(q, k, v, out, lse, scale, causal, layout, variant: _checks.Variant) -> None:
    """kgen_attention_forward_variant on the current stream: writes out (and lse unless None)."""
    c, keep = _variant_struct(variant)
    _launch("kgen_attention_forward_variant", _lib.ATTENTION_OPTIONS, (_scale(scale), int(causal)), (q, k, v, out, lse),
            _swap(layout), ctypes.addressof(c))
    del keep  # the variant's descriptors, read by the call


def variant_forward(q, k, v, scale, causal, layout, variant: _checks.Variant, with_lse: bool = True):
    """(o, lse) of a variant; lse is None unless with_lse."""
    o, lse = _forward_outputs(q, _swap(layout), with_lse, v)
    variant_forward_out(q, k, v, o, lse, scale, causal, layout, variant)
    return o, lse


def varlen_forward_out(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal,
                       variant: _checks.Variant) -> None:
    """kgen_attention_varlen_forward on the current stream: q (total_q, h_q, d), k and v (total_k,
    h_kv, d); writes out (like q) and lse ((h_q, total_q) fp32, unless None)."""
    c, keep = _variant_struct(variant)
    sequences = _sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _launch("kgen_attention_varlen_forward", _lib.ATTENTION_OPTIONS, (_scale(scale), int(causal)), (q, k, v, out, lse),
            False, ctypes.addressof(sequences[0]), ctypes.addressof(c))
    del keep, sequences  # read by the call


def _sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, describe=_variant_tensor, number=int):
    """(kgen_packed_sequences, its descriptors): all must live until the call returns. `describe`
    and `number` make the descriptors and the ints (see _variant_struct)."""
    cu_q, cu_k = describe(cu_seqlens_q), describe(cu_seqlens_k)
    return _lib.PackedSequences(ctypes.addressof(cu_q), ctypes.addressof(cu_k), number(max_seqlen_q),
                                number(max_seqlen_k)), cu_q, cu_k


def varlen_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, sinks_grad, tensor_grads, cu_seqlens_q, cu_seqlens_k,
                        max_seqlen_q, max_seqlen_k, scale, causal, deterministic, variant: _checks.Variant) -> None:
    """kgen_attention_varlen_backward on the current stream (the library allocates its scratch
    stream-ordered): writes dq, dk, dv, sinks_grad (with sinks) and the learnable tensors' grads."""
    c, keep = _variant_struct(variant, sinks_grad, tensor_grads)
    sequences = _sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _launch("kgen_attention_varlen_backward", _lib.ATTENTION_BACKWARD_OPTIONS,
            _gradient_options(scale, causal, deterministic, None), (q, k, v, o, lse, _dense(d_o), dq, dk, dv),
            False, ctypes.addressof(sequences[0]), ctypes.addressof(c))
    del keep, sequences


def varlen_attention_backward(q, k, v, o, lse, d_o, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                              causal=False, deterministic=False, tensor_learnable=None, *variant, **named):
    """The operator's kernel: (dq, dk, dv, sinks_grad, [gradient of each learnable tensor]) of a packed batch."""
    variant = _variant(variant, named)
    learnable = _learnable(variant, tensor_learnable)
    dq, dk, dv, sinks_grad, grads = _variant_backward_outputs(q, k, v, variant, learnable)
    varlen_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, None if variant.sinks is None else sinks_grad,
                        _tensor_grads(learnable, grads), cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                        causal, deterministic, variant)
    return dq, dk, dv, sinks_grad, grads


def varlen_attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                     max_seqlen_k, scale=None, causal=False, deterministic=False, config=None, *variant,
                                     **named):
    """The operator's kernel: (q_bar, k_bar, v_bar, do_bar) of kgen_attention_varlen_double_backward
    (packed like q and k; the library allocates its scratch stream-ordered; the variant's sinks and
    tensors are constants)."""
    variant = _variant(variant, named)
    outputs = _double_backward_outputs(q, k, v, o)
    c, keep = _variant_struct(variant)
    sequences = _sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _launch("kgen_attention_varlen_double_backward", _lib.ATTENTION_BACKWARD_OPTIONS,
            _gradient_options(scale, causal, deterministic, config),
            (q, k, v, o, lse, *map(_dense, (d_o, gq, gk, gv)), *outputs), False, ctypes.addressof(sequences[0]),
            ctypes.addressof(c))
    del keep, sequences  # read by the call
    return outputs


def paged_forward_out(q, k_cache, v_cache, out, lse, block_table, cache_seqlens, scale, causal, layout,
                      variant: _checks.Variant) -> None:
    """kgen_attention_paged_forward on the current stream: q (b, n_q, h_q, d) for layout "bnhd"
    or (b, h_q, n_q, d) for "bhnd", the caches (num_pages, page_size, h_kv, d); writes out (like q)
    and lse ((b, h_q, n_q) fp32, unless None)."""
    c, keep = _variant_struct(variant)
    table = _variant_tensor(block_table)
    lens = None if cache_seqlens is None else _variant_tensor(cache_seqlens)
    kv = _lib.PagedKV(ctypes.addressof(table), None if lens is None else ctypes.addressof(lens))
    caches = (_variant_tensor(k_cache), _variant_tensor(v_cache))
    swap = _swap(layout)
    frame, addresses, keep_q = _pack(_lib.ATTENTION_OPTIONS, (_scale(scale), int(causal)), (q, out, lse), swap)
    status = _lib.function("kgen_attention_paged_forward")(
        addresses[0], ctypes.addressof(caches[0]), ctypes.addressof(caches[1]), addresses[1], addresses[2],
        frame.options, ctypes.addressof(kv), ctypes.addressof(c), _stream(q.get_device()))
    del keep, keep_q, table, lens, kv, caches  # read by the call
    if status:
        _lib.raise_error("kgen_attention_paged_forward", status)


def paged_attention_forward(q, k_cache, v_cache, block_table, cache_seqlens=None, scale=None, causal=False,
                            layout="bnhd", *variant, **named):
    """The operator's kernel: (o, lse) of paged K/V."""
    o, lse = _forward_outputs(q, _swap(layout))
    paged_forward_out(q, k_cache, v_cache, o, lse, block_table, cache_seqlens, scale, causal, layout,
                      _variant(variant, named))
    return o, lse


# --- paged K/V: append, plan and run (docs/attention.md §10) -----------------------------------------

def _descriptor(t, swap: bool = False):
    """_variant_tensor of `t`, or None for None."""
    return None if t is None else _variant_tensor(t, swap)


def _address(descriptor):
    return None if descriptor is None else ctypes.addressof(descriptor)


def _call(function: str, *args) -> None:
    status = _lib.function(function)(*args)
    if status:
        _lib.raise_error(function, status)


def paged_append(k, v, k_cache, v_cache, block_table, cache_seqlens, rotary_cos=None, rotary_sin=None,
                 rotary_interleaved=False, q=None, q_out=None, q_sequential=True, layout="bnhd") -> None:
    """kgen_attention_paged_append on the current stream: k and v (b, n_new, h_kv, d) for layout
    "bnhd" (or (b, h_kv, n_new, d) for "bhnd") into the caches (num_pages, page_size, h_kv, d)
    through block_table (None: contiguous caches (b_cache, n_cache, h_kv, d)) at cache_seqlens;
    rotary tables rotate k, and q (same layout) into q_out (None: in place)."""
    swap = _swap(layout)
    new = (_descriptor(k, swap), _descriptor(v, swap))
    caches = (_descriptor(k_cache), _descriptor(v_cache))
    table, lens = _descriptor(block_table), _descriptor(cache_seqlens)
    kv = _lib.PagedKV(_address(table), _address(lens))
    tables, rotary = (None, None), None
    if rotary_cos is not None or rotary_sin is not None:
        tables = (_descriptor(rotary_cos), _descriptor(rotary_sin))
        rotary = _lib.Rotary(_address(tables[0]), _address(tables[1]), int(bool(rotary_interleaved)),
                             int(bool(q_sequential)))
    queries = (_descriptor(q, swap), _descriptor(q_out, swap))
    first = k_cache if k_cache is not None else k
    _call("kgen_attention_paged_append", *[_address(d) for d in new + caches], ctypes.addressof(kv), _address(rotary),
          *[_address(d) for d in queries], _stream(first.get_device() if first is not None else -1))
    del new, caches, table, lens, tables, queries  # read by the call


class PagedPlan:
    """A planned paged attention call (kgen_attention_paged_plan): its workspace bytes, split
    count and config; the C plan is freed with the object."""

    def __init__(self, handle: ctypes.c_void_p, keep):
        self._handle = handle
        self._keep = keep  # the variant's tensors, which the plan's kernels read
        size, splits, config = ctypes.c_size_t(0), ctypes.c_int(0), ctypes.c_char_p()
        _call("kgen_paged_plan_info", handle, ctypes.byref(size), ctypes.byref(splits), ctypes.byref(config))
        self.workspace_bytes, self.splits, self.config = size.value, splits.value, config.value.decode()

    def __del__(self):
        if getattr(self, "_handle", None):
            _lib.function("kgen_paged_plan_destroy")(self._handle)
            self._handle = None


def paged_plan(q, k_cache, v_cache, out, lse, block_table, cache_seqlens, scale, causal, layout,
               variant: _checks.Variant) -> PagedPlan:
    """kgen_attention_paged_plan for a paged_forward_out call on these tensors (no launch)."""
    c, keep = _variant_struct(variant)
    swap = _swap(layout)
    views = (_descriptor(q, swap), _descriptor(k_cache), _descriptor(v_cache), _descriptor(out, swap), _descriptor(lse))
    table, lens = _descriptor(block_table), _descriptor(cache_seqlens)
    kv = _lib.PagedKV(_address(table), _address(lens))
    options = _lib.AttentionOptions(_scale(scale), int(causal))
    handle = ctypes.c_void_p()
    _call("kgen_attention_paged_plan", *[_address(d) for d in views], ctypes.byref(options), ctypes.addressof(kv),
          ctypes.addressof(c), ctypes.byref(handle))
    return PagedPlan(handle, (keep, variant))


def paged_run(plan: PagedPlan, q, k_cache, v_cache, out, lse, block_table, cache_seqlens, workspace, layout) -> None:
    """kgen_attention_paged_run on the current stream: no allocation, synchronisation or compile
    (CUDA-graph capturable); `workspace` a uint8 tensor of at least plan.workspace_bytes (or None)."""
    swap = _swap(layout)
    views = (_descriptor(q, swap), _descriptor(k_cache), _descriptor(v_cache), _descriptor(out, swap), _descriptor(lse))
    table, lens = _descriptor(block_table), _descriptor(cache_seqlens)
    kv = _lib.PagedKV(_address(table), _address(lens))
    scratch = None if workspace is None else workspace.data_ptr()
    nbytes = 0 if workspace is None else workspace.numel() * workspace.element_size()
    _call("kgen_attention_paged_run", plan._handle, *[_address(d) for d in views], ctypes.addressof(kv), scratch,
          nbytes, _stream(q.get_device()))
    del views, table, lens, kv  # read by the call


def varlen_outputs(q, with_lse: bool = True):
    """(o, lse) buffers of a packed forward: o like q (contiguous), lse fp32 (h_q, total_q)."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device) if with_lse else None
    return o, lse


def varlen_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None, causal=False,
                             *variant, **named):
    """The operator's kernel: (o, lse) of a packed batch (the variant's fields in _checks.Variant's order)."""
    o, lse = varlen_outputs(q)
    varlen_forward_out(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal,
                       _variant(variant, named))
    return o, lse


def attention_forward_variant_out(q, k, v, out, lse, scale=None, causal=False, layout="bhnd", *variant, **named):
    """The operator's kernel: the variant's fields follow layout (_checks.Variant's order)."""
    variant_forward_out(q, k, v, out, lse, scale, causal, layout, _variant(variant, named))


def attention_forward_variant(q, k, v, scale=None, causal=False, layout="bhnd", *variant, **named):
    return variant_forward(q, k, v, scale, causal, layout, _variant(variant, named))


def _gradient_scratch(q, swap: bool, deterministic: bool, double: bool):
    """(word, query) of a gradient call's scratch (_calls.launch): its bytes for q's shape."""
    def query(size):
        frame, (q_address,), keep = _pack(_lib.ATTENTION_BACKWARD_OPTIONS, (0.0, 0, int(deterministic), 0, 0, 0), (q,),
                                          swap)
        _lib.call("kgen_attention_backward_workspace_bytes", q_address, frame.options, int(double), size)
    return _calls.BACKWARD_WORKSPACE, query


def _gradient_options(scale, causal, deterministic, config) -> tuple:
    """A gradient call's options, its workspace 0 (the call form writes its scratch there)."""
    return _scale(scale), int(causal), int(deterministic), 0, 0, _lib.c_string(config)


def attention_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, scale=None, causal=False, layout="bhnd",
                           deterministic=False, config=None):
    swap = _swap(layout)
    _launch("kgen_attention_backward", _lib.ATTENTION_BACKWARD_OPTIONS,
            _gradient_options(scale, causal, deterministic, config), (q, k, v, o, lse, _dense(d_o), dq, dk, dv), swap,
            scratch=_gradient_scratch(q, swap, deterministic, False))


def attention_backward(q, k, v, o, lse, d_o, scale=None, causal=False, layout="bhnd", deterministic=False,
                       config=None):
    """(dq, dk, dv) like q, k, v (_calls.backward)."""
    return _calls.backward(q, k, v, o, lse, d_o, scale, causal, layout, deterministic, config)


def _learnable(variant: _checks.Variant, tensor_learnable) -> tuple:
    """One flag per variant tensor: whether it gets a gradient (None or empty: none does)."""
    if not tensor_learnable:
        return (False,) * len(variant.tensors)
    if len(tensor_learnable) != len(variant.tensors):
        raise ValueError(f"tensor_learnable must have one entry per tensor, got {len(tensor_learnable)} for "
                         f"{len(variant.tensors)} tensors")
    return tuple(bool(x) for x in tensor_learnable)


def _variant_backward_outputs(q, k, v, variant: _checks.Variant, learnable: tuple):
    """dq, dk, dv (like q, k, v), sinks_grad (float32 like sinks, or (0,) without sinks) and the
    learnable tensors' gradients (float32, each tensor's shape, contiguous)."""
    sinks_shape = (0,) if variant.sinks is None else variant.sinks.shape
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            q.new_empty(sinks_shape, dtype=torch.float32),
            [t.new_empty(t.shape, dtype=torch.float32) for t, grad in zip(variant.tensors, learnable) if grad])


def _tensor_grads(learnable: tuple, grads) -> list:
    """The gradient buffer of each variant tensor, None where it does not learn."""
    grads = iter(grads)
    return [next(grads) if grad else None for grad in learnable]


def variant_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, sinks_grad, tensor_grads, scale, causal, layout,
                         deterministic, config, variant: _checks.Variant) -> None:
    """kgen_attention_backward_variant on the current stream: writes dq, dk, dv, sinks_grad (with
    sinks) and tensor_grads[i] for each variant tensor i whose entry is not None (it learns)."""
    swap = _swap(layout)
    c, keep = _variant_struct(variant, sinks_grad, tensor_grads)
    _launch("kgen_attention_backward_variant", _lib.ATTENTION_BACKWARD_OPTIONS,
            _gradient_options(scale, causal, deterministic, config), (q, k, v, o, lse, _dense(d_o), dq, dk, dv), swap,
            ctypes.addressof(c), scratch=_gradient_scratch(q, swap, deterministic, False))
    del keep


def attention_backward_variant(q, k, v, o, lse, d_o, scale=None, causal=False, layout="bhnd", deterministic=False,
                               config=None, tensor_learnable=None, *variant, **named):
    """The operator's kernel: (dq, dk, dv, sinks_grad, [gradient of each learnable tensor])."""
    variant = _variant(variant, named)
    learnable = _learnable(variant, tensor_learnable)
    dq, dk, dv, sinks_grad, grads = _variant_backward_outputs(q, k, v, variant, learnable)
    variant_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, None if variant.sinks is None else sinks_grad,
                         _tensor_grads(learnable, grads), scale, causal, layout, deterministic, config, variant)
    return dq, dk, dv, sinks_grad, grads


def _double_backward_outputs(q, k, v, o):
    """(q_bar, k_bar, v_bar, do_bar): like q, k and v; do_bar like q, or like o where v has a head dim
    of its own (MLA)."""
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            torch.empty_like(q if o.shape[-1] == q.shape[-1] else o))


def attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, scale=None, causal=False, layout="bhnd",
                              deterministic=False, config=None):
    """(q_bar, k_bar, v_bar, do_bar), as _double_backward_outputs allocates them (_calls.double_backward)."""
    return _calls.double_backward(q, k, v, o, lse, d_o, gq, gk, gv, scale, causal, layout, deterministic, config)


def attention_double_backward_variant(q, k, v, o, lse, d_o, gq, gk, gv, scale=None, causal=False, layout="bhnd",
                                      deterministic=False, config=None, *variant, **named):
    """The operator's kernel: (q_bar, k_bar, v_bar, do_bar) of kgen_attention_double_backward_variant
    (the variant's sinks and tensors are constants: no gradient reaches them)."""
    variant = _variant(variant, named)
    swap = _swap(layout)
    outputs = _double_backward_outputs(q, k, v, o)
    c, keep = _variant_struct(variant)
    _launch("kgen_attention_double_backward_variant", _lib.ATTENTION_BACKWARD_OPTIONS,
            _gradient_options(scale, causal, deterministic, config),
            (q, k, v, o, lse, *map(_dense, (d_o, gq, gk, gv)), *outputs), swap, ctypes.addressof(c),
            scratch=_gradient_scratch(q, swap, deterministic, True))
    del keep
    return outputs


# --- LRPE-cosine ----------------------------------------------------------------------------------

def _act(act: str) -> int:
    code = _lib.LRPE_ACTS.get(act)
    if code is None:
        raise ValueError(f"act must be one of {LRPE_ACTS}, got {act!r}")
    return code


def _lrpe_output(x, width: int):
    return x.new_empty((*x.shape[:-1], width))


def _angles(x, swap: bool):
    """md_lrpe_cosine's angle cache: float32 (h, n, d), contiguous."""
    s = x.shape
    h, n = (1, s[1]) if len(s) == 3 else ((s[2], s[1]) if swap else (s[1], s[2]))
    return x.new_empty((h, n, s[-1]), dtype=torch.float32)


def _lrpe(function: str, tensors, act: str, offset: int, grid, extra: int, layout: str, config, backward: bool):
    """One LRPE call; tensors in the C function's order, x first."""
    swap, code = _swap(layout), _act(act)
    x = tensors[0]
    scratch = None
    if act == "softmax_seq":
        def query(size):
            frame, (x_address,), keep = _pack(_lib.LRPE_OPTIONS, (0,) * 10, (x,), swap)
            _lib.call("kgen_lrpe_workspace_bytes", x_address, code, int(backward), size)
        scratch = _calls.LRPE_WORKSPACE, query
    g = (*grid, 0, 0, 0)
    options = (code, offset, len(grid), g[0], g[1], g[2], extra, _lib.c_string(config), 0, 0)
    _launch(function, _lib.LRPE_OPTIONS, options, tensors, swap, scratch=scratch)


def lrpe_cosine_forward(x, theta, offset=0, act="none", layout="bhnd", config=None):
    o = _lrpe_output(x, 2 * x.shape[-1])
    _lrpe("kgen_lrpe_cosine_forward", (x, theta, o), act, offset, (), 0, layout, config, False)
    return o


def lrpe_cosine_backward(x, theta, d_o, offset=0, act="none", layout="bhnd", config=None):
    dx = torch.empty_like(x)
    _lrpe("kgen_lrpe_cosine_backward", (x, theta, _dense(d_o), dx), act, offset, (), 0, layout, config, True)
    return dx


def md_lrpe_cosine_forward_cached(x, theta, grid, extra=0, act="none", layout="bhnd", config=None, cache=True):
    """(o, angles); angles is None unless cache."""
    o = _lrpe_output(x, 2 * x.shape[-1])
    angles = _angles(x, _swap(layout)) if cache else None
    _lrpe("kgen_md_lrpe_cosine_forward", (x, theta, o, angles), act, 0, grid, extra, layout, config, False)
    return o, angles


def md_lrpe_cosine_forward(x, theta, grid, extra=0, act="none", layout="bhnd", config=None):
    return md_lrpe_cosine_forward_cached(x, theta, grid, extra, act, layout, config, cache=False)[0]


def md_lrpe_cosine_backward(x, theta, d_o, angles, grid, extra=0, act="none", layout="bhnd", config=None):
    dx = torch.empty_like(x)
    _lrpe("kgen_md_lrpe_cosine_backward", (x, theta, _dense(d_o), dx, angles), act, 0, grid, extra, layout, config,
          True)
    return dx
