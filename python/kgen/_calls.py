"""Call forms: the host path of a repeated kgen call at the cost of its data pointers.

A C call's arguments are its options struct and one DLTensor per tensor. Between two calls of a
training loop or a decode step they differ only in the tensors' data pointers: shapes, strides,
dtypes, devices and options repeat. A Form packs them once, in a buffer of its own (the layout of
_lib.Frame), for one such combination, its key; a call of the form then writes its tensors' data
pointers (and its scratch's) into the buffer and calls the C function with the buffer's addresses.
What the library checks (shapes, dtypes, devices, strides) it still checks on every call: the
descriptors are the tensors' own, so its error names the argument as before.

The key holds what the descriptors and the outputs' allocation depend on, read straight from the
tensors (shape, stride(), dtype, get_device()); the outputs the call allocates (o and lse, the
gradients, the scratch) follow from it, so they are not read again. The autograd Functions of
kgen.torch go one step further: the backward of a forward form is keyed by that form's id and
d_o's description alone (q, k, v, o and lse are the forward's, whose metadata autograd's saved
tensors guard: an in-place change bumps their version and the backward refuses them).

Forms live per thread (a ctypes call releases the GIL, so two threads must not share a buffer) in a
dict bounded by MAX_FORMS (cleared when full). A key's first call is packed once into the thread's
shared frame (as every call was before forms) and its second builds the form, so that a key that
changes on every call (a growing K/V cache's shapes) pays no form construction.
"""
from __future__ import annotations

import ctypes
import itertools
import threading

import torch

from . import _checks, _lib
from . import _kernels as K

MAX_FORMS = 256
_F32, _U8 = torch.float32, torch.uint8
_empty, _empty_like = torch.empty, torch.empty_like
_forms = threading.local()  # .cache: this thread's forms by key
_ids = itertools.count(1)
# Word (8 bytes) of the scratch pointer in the options structs; its size follows it.
BACKWARD_WORKSPACE = _lib.AttentionBackwardOptions.workspace.offset // 8
LRPE_WORKSPACE = _lib.LrpeOptions.workspace.offset // 8


def _cache() -> dict:
    try:
        return _forms.cache
    except AttributeError:
        cache = _forms.cache = {}
        return cache


def _store(cache: dict, key, form):
    if len(cache) >= MAX_FORMS:
        cache.clear()
    cache[key] = form
    return form


# A key's mark after its first call, which is packed once into the thread's shared frame (K._pack):
# its second call builds its form. A key that changes on every call (a growing K/V cache's shapes)
# so costs what packing a call costs, not a form's construction as well.
_SEEN = "seen"


def _once(name: str, options_format: str, options: tuple, tensors, swap: bool, *extra) -> None:
    """One call packed into the thread's shared frame, without a form."""
    frame, addresses, keep = K._pack(options_format, options, tensors, swap)
    status = _lib.function(name)(*addresses, frame.options, *extra, K._stream(tensors[0].get_device()))
    del keep  # the exported descriptors, read by the call
    if status:
        _lib.raise_error(name, status)


def reset() -> None:
    """Drop this thread's forms (tests that swap the library for a stand-in)."""
    _forms.cache = {}


def _descriptor(t, shape_address: int, strides_address: int, swap: bool) -> tuple:
    """The DLTensor fields of `t` and its shape and stride arrays (its (b, h, n, ·) view when 4-d
    and `swap`), in _lib.Frame's order."""
    shape, strides = tuple(t.shape), t.stride()
    if swap and len(shape) == 4:
        shape = (shape[0], shape[2], shape[1], shape[3])
        strides = (strides[0], strides[2], strides[1], strides[3])
    code, bits = _checks.dl_dtype(t.dtype)
    device = t.get_device()
    device_type = _checks.DL_CUDA if device >= 0 else (_lib.kDLCPU if t.is_cpu else _lib.kDLExtDev)
    return (t.data_ptr(), device_type, max(device, 0), len(shape), code, bits, 1, shape_address, strides_address, 0,
            *shape, *strides)


class Form:
    """One call form's arguments, packed: `words` views the buffer as 64-bit words, `data[i]` is
    the word of tensor i's data pointer (None for a NULL tensor), `shapes[i]` the word of its
    shape's first extent, `args` the addresses the C function takes (descriptors, then options),
    `workspace` the word of the scratch pointer (None:
    no scratch) and `nbytes` its size. The attributes after those describe the outputs a call
    allocates; `id` names the form in the keys of the forms built on it."""

    __slots__ = ("id", "name", "buffer", "words", "data", "shapes", "args", "device", "torch_device", "workspace",
                 "nbytes", "o_shape", "o_like", "rows", "dense", "__weakref__")

    def __init__(self, name: str, options_format: str, options, tensors, swap):
        """`swap`: whether 4-d tensors are described as their (b, h, n, ·) views, for all tensors
        or per tensor (a tuple)."""
        layout = _lib.frame(options_format, tuple(None if t is None else t.dim() for t in tensors))
        swaps = swap if isinstance(swap, tuple) else (swap,) * len(tensors)
        self.id, self.name = next(_ids), name
        self.buffer = ctypes.create_string_buffer(layout.struct.size)
        base = ctypes.addressof(self.buffer)
        values = list(options)
        data, shapes, args = [], [], []
        for t, slot, swap_t in zip(tensors, layout.tensors, swaps):
            if t is None:
                data.append(None)
                shapes.append(None)
                args.append(None)
                continue
            offset = slot[0] - layout.options
            values += _descriptor(t, base + slot[1] - layout.options, base + slot[2] - layout.options, swap_t)
            data.append(offset // 8)
            shapes.append((slot[1] - layout.options) // 8)
            args.append(base + offset)
        layout.struct.pack_into(self.buffer, 0, *values)
        self.words = (ctypes.c_uint64 * (layout.struct.size // 8)).from_buffer(self.buffer)
        self.data, self.shapes, self.args = tuple(data), tuple(shapes), (*args, base)
        first = tensors[0]
        self.device, self.torch_device = first.get_device(), first.device
        self.workspace, self.nbytes = None, 0
        self.o_shape = self.o_like = self.rows = self.dense = None

    def scratch(self, word: int, query) -> None:
        """Give the form a scratch of `query`'s bytes (query(c_size_t pointer) asks the library),
        allocated per call from PyTorch's caching allocator (stream-ordered, CUDA-graph
        capturable). If the query fails, no scratch: the call itself reports why."""
        size = ctypes.c_size_t(0)
        try:
            query(ctypes.byref(size))
        except _lib.KgenError:
            return
        self.workspace, self.nbytes = word, size.value
        self.words[word + 1] = size.value

    def call(self, *extra) -> None:
        """The C call on the current stream of the first tensor's device (the tensors' pointers
        written); `extra` goes between the options and the stream."""
        status = _lib.function(self.name)(*self.args, *extra, K._stream(self.device))
        if status:
            _lib.raise_error(self.name, status)


# --- attention forward ------------------------------------------------------------------------------

def forward(q, k, v, scale=None, causal=False, layout="bhnd", with_lse=True, build=False):
    """(o, lse, form) of kgen_attention_forward: o like q (v's head dim, contiguous in q's layout),
    lse float32 (b, h_q, n_q) unless not with_lse (then None); form None for a call packed once.
    `build`: a key's first call builds its form too (autograd's forward, whose backward and double
    backward key their forms by it, even on a graph built once and differentiated many times)."""
    key = ("fwd", q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
           q.get_device(), k.get_device(), v.get_device(), scale, causal, layout, with_lse)
    cache = _cache()
    form = cache.get(key)
    if type(form) is not Form:
        return _forward_miss(cache, key, form is None and not build, q, k, v, scale, causal, layout, with_lse)
    o = _empty_like(q) if form.o_like else _empty(*form.o_shape, dtype=q.dtype, device=form.torch_device)
    lse = _empty(*form.rows, dtype=_F32, device=form.torch_device) if with_lse else None
    # the pointers written after every allocation, right before the call (nothing between them
    # runs Python that could call through the same form)
    words, data = form.words, form.data
    words[data[0]] = q.data_ptr()
    words[data[1]] = k.data_ptr()
    words[data[2]] = v.data_ptr()
    words[data[3]] = o.data_ptr()
    if with_lse:
        words[data[4]] = lse.data_ptr()
    form.call()
    return o, lse, form


def _forward_miss(cache, key, first: bool, q, k, v, scale, causal, layout, with_lse: bool):
    """forward's call of a key without a form: packed once on its first sight, through the form
    built from it on its second."""
    swap = K._swap(layout)
    options = (K._scale(scale), int(causal))
    o_shape = tuple(q.shape) if v.dim() != q.dim() else (*q.shape[:-1], v.shape[-1])
    like = o_shape == tuple(q.shape) and q.is_contiguous()
    o = _empty_like(q) if like else _empty(*o_shape, dtype=q.dtype, device=q.device)
    lse = rows = None
    if with_lse:
        s = q.shape
        rows = (s[0], s[2], s[1]) if swap and len(s) == 4 else tuple(s[:-1])
        lse = _empty(*rows, dtype=_F32, device=q.device)
    tensors = (q, k, v, o, lse)
    if first:
        _store(cache, key, _SEEN)
        _once("kgen_attention_forward", _lib.ATTENTION_OPTIONS, options, tensors, swap)
        return o, lse, None
    form = Form("kgen_attention_forward", _lib.ATTENTION_OPTIONS, options, tensors, swap)
    form.o_shape, form.o_like, form.rows = o_shape, like, rows
    form.call()  # its buffer holds these tensors' pointers
    return o, lse, _store(cache, key, form)


def forward_out(q, k, v, out, lse, scale=None, causal=False, layout="bhnd") -> None:
    """kgen_attention_forward into out (and lse unless None)."""
    key = ("fwo", q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out.shape, out.stride(), q.dtype,
           k.dtype, v.dtype, out.dtype, q.get_device(), k.get_device(), v.get_device(), out.get_device(), _meta(lse),
           scale, causal, layout)
    cache = _cache()
    form = cache.get(key)
    tensors = (q, k, v, out, lse)
    if type(form) is not Form:
        options = (K._scale(scale), int(causal))
        if form is None:
            _store(cache, key, _SEEN)
            _once("kgen_attention_forward", _lib.ATTENTION_OPTIONS, options, tensors, K._swap(layout))
            return
        form = _store(cache, key, Form("kgen_attention_forward", _lib.ATTENTION_OPTIONS, options, tensors,
                                       K._swap(layout)))
    else:
        _write(form, tensors)
    form.call()


def forward_fp8(q, k, v, descales, scale, causal, layout, out, lse, config=None) -> None:
    """kgen_attention_forward_fp8 into out (and lse unless None); descales (q, k, v), each None or a
    float32 tensor (a 0-d one is passed as one element); config None: the default."""
    descales = tuple(None if d is None else (d.reshape(1) if d.dim() == 0 else d) for d in descales)
    options = (K._scale(scale), int(causal))
    Form("kgen_attention_forward_fp8", _lib.ATTENTION_OPTIONS, options, (q, k, v, out, lse, *descales),
         K._swap(layout)).call(_lib.c_string(config))


# --- paged K/V ----------------------------------------------------------------------------------------

class PagedForm(Form):
    """A Form of kgen_attention_paged_forward: q, the caches, o and lse as arguments, the block
    table and cache_seqlens through its kgen_paged_kv, and the empty variant."""

    __slots__ = ("kv", "variant")

    def __init__(self, options, tensors, swap: bool):
        super().__init__("kgen_attention_paged_forward", _lib.ATTENTION_OPTIONS, options, tensors,
                         (swap, False, False, swap, swap, False, False))
        table, lens = self.args[5], self.args[6]
        self.kv = _lib.PagedKV(table, lens)
        self.variant = _lib.AttentionVariant()
        self.args = (*self.args[:5], self.args[7], ctypes.addressof(self.kv), ctypes.addressof(self.variant))


def paged_forward_out(q, k_cache, v_cache, out, lse, block_table, cache_seqlens, scale, causal, layout) -> None:
    """kgen_attention_paged_forward of plain attention (no variant) into out (and lse unless None),
    through its form (K.paged_forward_out's arguments)."""
    key = ("pgo", _meta(q), _meta(k_cache), _meta(v_cache), _meta(out), _meta(lse), _meta(block_table),
           _meta(cache_seqlens), scale, causal, layout)
    cache = _cache()
    form = cache.get(key)
    tensors = (q, k_cache, v_cache, out, lse, block_table, cache_seqlens)
    if type(form) is not PagedForm:
        if form is None:
            _store(cache, key, _SEEN)
            K.paged_forward_out(q, k_cache, v_cache, out, lse, block_table, cache_seqlens, scale, causal, layout,
                                K._variant((), {}))
            return
        form = _store(cache, key, PagedForm((K._scale(scale), int(causal)), tensors, K._swap(layout)))
    else:
        _write(form, tensors)
    form.call()


def _workspace_query(function: str, q, swap: bool, deterministic: bool, *extra):
    """Form.scratch's query of a gradient call's scratch: C `function`(q's descriptor, the
    options, extra..., size) with q described as the call's forms describe it."""
    def query(size):
        query_form = Form(function, _lib.ATTENTION_BACKWARD_OPTIONS, (0.0, 0, int(deterministic), 0, 0, 0), (q,), swap)
        _lib.call(function, query_form.args[0], query_form.args[1], *extra, size)
    return query


# --- packed batches ---------------------------------------------------------------------------------

class VarlenForm(Form):
    """A Form of a packed call (kgen_attention_varlen_forward or _backward) of plain attention:
    its tensors but the last two as arguments, the last two (cu_seqlens_q, cu_seqlens_k) through
    its kgen_packed_sequences, the variant NULL. From one packed batch of a training run to the
    next, the sequences' count and longest lengths change while every other description stays:
    they are not in the form's key, and each call writes them (`sequences`)."""

    __slots__ = ("packed",)

    def __init__(self, name: str, options_format: str, options, tensors, max_seqlen_q: int, max_seqlen_k: int):
        super().__init__(name, options_format, options, tensors, False)
        *args, _cu_q, _cu_k, base = self.args
        self.packed = _lib.PackedSequences(_cu_q, _cu_k, max_seqlen_q, max_seqlen_k)
        self.args = (*args, base, ctypes.addressof(self.packed), None)

    def sequences(self, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int) -> None:
        """Write the batch's sequences: cu_seqlens' pointers and lengths (1-d tensors, the last two
        of the form's tensors) and the longest lengths."""
        words, data, shapes = self.words, self.data, self.shapes
        words[data[-2]] = cu_seqlens_q.data_ptr()
        words[shapes[-2]] = cu_seqlens_q.shape[0]
        words[data[-1]] = cu_seqlens_k.data_ptr()
        words[shapes[-1]] = cu_seqlens_k.shape[0]
        packed = self.packed
        packed.max_seqlen_q = max_seqlen_q
        packed.max_seqlen_k = max_seqlen_k


def varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, scale, causal,
                   with_lse: bool, build: bool = False):
    """(o, lse, form) of kgen_attention_varlen_forward of plain attention: o like q (contiguous),
    lse fp32 (h_q, total_q) unless not with_lse (then None); cu_seqlens 1-d. form and `build` as
    in forward."""
    key = ("vfw", q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
           q.get_device(), k.get_device(), v.get_device(), cu_seqlens_q.stride(), cu_seqlens_q.dtype,
           cu_seqlens_q.get_device(), cu_seqlens_k.stride(), cu_seqlens_k.dtype, cu_seqlens_k.get_device(), scale,
           causal, with_lse)
    cache = _cache()
    form = cache.get(key)
    o, lse = K.varlen_outputs(q, with_lse)
    tensors = (q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    if type(form) is not VarlenForm:
        if form is None and not build:
            _store(cache, key, _SEEN)
            K.varlen_forward_out(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                 causal, K._variant((), {}))
            return o, lse, None
        form = _store(cache, key, VarlenForm("kgen_attention_varlen_forward", _lib.ATTENTION_OPTIONS,
                                             (K._scale(scale), int(causal)), tensors, max_seqlen_q, max_seqlen_k))
    else:
        _write(form, tensors[:5])
        form.sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    form.call()
    return o, lse, form


def varlen_backward(q, k, v, o, lse, d_o, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, scale,
                    causal, deterministic: bool, of: Form):
    """(dq, dk, dv) of kgen_attention_varlen_backward of plain attention; `of` the forward form that
    made o and lse (varlen_forward's), whose id stands for the description of q, k, v, o, lse and
    cu_seqlens in the key. The scratch comes from PyTorch's caching allocator."""
    key = ("vbw", of.id, d_o.shape, d_o.stride(), d_o.dtype, d_o.get_device(), deterministic)
    cache = _cache()
    form = cache.get(key)
    given = d_o
    if form is None or form.dense:
        d_o = K._dense(d_o)
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    tensors = (q, k, v, o, lse, d_o, dq, dk, dv, cu_seqlens_q, cu_seqlens_k)
    if form is None:
        name = "kgen_attention_varlen_backward"
        options = (K._scale(scale), int(causal), int(deterministic), 0, 0, 0)
        form = VarlenForm(name, _lib.ATTENTION_BACKWARD_OPTIONS, options, tensors, max_seqlen_q, max_seqlen_k)
        form.scratch(BACKWARD_WORKSPACE, _workspace_query("kgen_attention_varlen_backward_workspace_bytes", q, False,
                                                          deterministic))
        form.dense = d_o is not given
        _store(cache, key, form)
    else:
        _write(form, tensors[:9])
        form.sequences(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    scratch = _scratch(form)
    form.call()
    del scratch  # freed stream-ordered: reused only by work queued after the launch
    return dq, dk, dv


# --- attention backward and double backward --------------------------------------------------------

def _gradient_form(key, name, double: bool, tensors, outputs, dense, scale, causal, layout, deterministic,
                   config) -> Form:
    """The form of kgen_attention_backward (double False) or kgen_attention_double_backward on
    `tensors` (the inputs, those of `dense` positions already made dense) and `outputs`."""
    swap = K._swap(layout)
    options = (K._scale(scale), int(causal), int(deterministic), 0, 0, _lib.c_string(config))
    form = Form(name, _lib.ATTENTION_BACKWARD_OPTIONS, options, (*tensors, *outputs), swap)
    form.scratch(BACKWARD_WORKSPACE, _workspace_query("kgen_attention_backward_workspace_bytes", tensors[0], swap,
                                                      deterministic, int(double)))
    form.dense = dense
    return _store(_cache(), key, form)


def _meta(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())


def _needs_dense(*tensors) -> tuple:
    """Positions of `tensors` that K._dense copies (an expanded or strided last dim)."""
    return tuple(i for i, t in enumerate(tensors) if t is not None and K._dense(t) is not t)


def _scratch(form: Form):
    if form.workspace is None:
        return None
    scratch = _empty(form.nbytes or 1, dtype=_U8, device=form.torch_device)
    form.words[form.workspace] = scratch.data_ptr()
    return scratch


def _write(form: Form, tensors) -> None:
    words = form.words
    for t, i in zip(tensors, form.data):
        if i is not None:
            words[i] = t.data_ptr()


def backward(q, k, v, o, lse, d_o, scale=None, causal=False, layout="bhnd", deterministic=False, config=None,
             of: Form | None = None):
    """(dq, dk, dv) of kgen_attention_backward. `of`: the forward form that made o and lse from
    q, k and v (kgen.torch's autograd), whose id then stands for their description in the key."""
    if of is not None:
        key = ("bwd", of.id, d_o.shape, d_o.stride(), d_o.dtype, d_o.get_device(), deterministic, config)
    else:
        key = ("bwd", _meta(q), _meta(k), _meta(v), _meta(o), _meta(lse), _meta(d_o), scale, causal, layout,
               deterministic, config)
    form = _cache().get(key)
    if form is None:
        dense = _needs_dense(d_o)
        if dense:
            d_o = K._dense(d_o)
        outputs = (_empty_like(q), _empty_like(k), _empty_like(v))
        form = _gradient_form(key, "kgen_attention_backward", False, (q, k, v, o, lse, d_o), outputs, dense, scale,
                              causal, layout, deterministic, config)
    elif form.dense:
        d_o = K._dense(d_o)
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    scratch = _scratch(form)
    words, data = form.words, form.data
    words[data[0]] = q.data_ptr()
    words[data[1]] = k.data_ptr()
    words[data[2]] = v.data_ptr()
    words[data[3]] = o.data_ptr()
    words[data[4]] = lse.data_ptr()
    words[data[5]] = d_o.data_ptr()
    words[data[6]] = dq.data_ptr()
    words[data[7]] = dk.data_ptr()
    words[data[8]] = dv.data_ptr()
    form.call()
    del scratch  # freed stream-ordered: reused only by work queued after the launch
    return dq, dk, dv


def double_backward(q, k, v, o, lse, d_o, gq, gk, gv, scale=None, causal=False, layout="bhnd", deterministic=False,
                    config=None, of: Form | None = None):
    """(q_bar, k_bar, v_bar, do_bar) of kgen_attention_double_backward (gq, gk, gv may be None);
    `of` as in backward."""
    if of is not None:
        key = ("dbl", of.id, _meta(d_o), _meta(gq), _meta(gk), _meta(gv), deterministic, config)
    else:
        key = ("dbl", _meta(q), _meta(k), _meta(v), _meta(o), _meta(lse), _meta(d_o), _meta(gq), _meta(gk), _meta(gv),
               scale, causal, layout, deterministic, config)
    form = _cache().get(key)
    gradients = (d_o, gq, gk, gv)
    if form is None:
        dense = _needs_dense(*gradients)
        gradients = tuple(K._dense(t) for t in gradients)
        outputs = K._double_backward_outputs(q, k, v, o)
        form = _gradient_form(key, "kgen_attention_double_backward", True, (q, k, v, o, lse, *gradients), outputs,
                              dense, scale, causal, layout, deterministic, config)
    elif form.dense:
        gradients = tuple(K._dense(t) for t in gradients)
    outputs = K._double_backward_outputs(q, k, v, o)
    scratch = _scratch(form)
    _write(form, (q, k, v, o, lse, *gradients, *outputs))
    form.call()
    del scratch
    return outputs


# --- any other call ---------------------------------------------------------------------------------

def launch(function: str, options_format: str, options: tuple, tensors, swap: bool, *extra, scratch=None) -> None:
    """C `function(tensors..., &options, extra..., stream)` through its form (the key: the
    function, options and each tensor's description). `scratch`: (word, query) of a call whose
    options hold a workspace (its pointer's word in the options, which hold 0 there, and
    Form.scratch's query, asked once per form)."""
    key = (function, options, swap, scratch is None, *[_meta(t) for t in tensors])
    cache = _cache()
    form = cache.get(key)
    if form is None and scratch is None:
        _store(cache, key, _SEEN)
        _once(function, options_format, options, tensors, swap, *extra)
        return
    if type(form) is not Form:
        form = Form(function, options_format, options, tensors, swap)
        if scratch is not None:
            form.scratch(*scratch)
        _store(cache, key, form)
    keep = _scratch(form)
    _write(form, tensors)
    form.call(*extra)
    del keep
