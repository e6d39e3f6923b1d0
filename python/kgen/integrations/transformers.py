"""Hugging Face transformers on kgen: `register()` adds kgen to transformers' attention functions.

    import kgen.integrations.transformers as kgen_hf
    kgen_hf.register()                                   # name "kgen"
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="kgen")
    model.set_attn_implementation("kgen")                # or switch a loaded model

Every attention layer then runs kgen.torch.attention: the forward, the backward of a training
step, and prefill and decode in generate() with a KV cache. The mapping of transformers' call
(module, query, key, value, attention_mask, scaling, dropout, sliding_window, softcap, s_aux):
- query, key, value (b, h, n, d) go in as (b, n, h, d) views (layout "bnhd"), so the output comes
  back as the (b, n, h, d) contiguous tensor transformers expects, with no copy; GQA as is;
- causal: the `is_causal` keyword, else module.is_causal, as transformers' SDPA path decides it.
  kgen's causal mask is bottom-right aligned, which is what a KV cache needs (the last query sits
  on the last key), and for n_q = 1 it masks nothing, as SDPA's is_causal=False does there;
- sliding_window w (a causal layer): window=(w - 1, 0), the keys w - 1 positions back to the
  query's own, i.e. transformers' mask kv_idx > q_idx - w (FlashAttention's path passes the same);
- scaling: scale; softcap: softcap; s_aux (gpt-oss's learned sinks): sinks, in float32.

Masks: register() also registers the mask builder `build_mask` under the same name. It hands
the layers no mask where the mask would be plain causal (no padding, no packed sequences, no
custom mask functions, the last query on the last key), and the mask transformers' SDPA path
would build otherwise. A sliding-window mask that has to be built anyway is remembered as plain,
and such layers run on kgen with the window (from the mask, so also for models that do not pass
`sliding_window` to the attention function). A padded batch whose valid tokens form one run per
row (left or right padding) is remembered too: its layers gather the valid rows into a packed batch
for kgen.torch.varlen_attention and scatter the output back (0 in padded query rows). Any other
mask (padding with holes, packed sequences, static caches, chunked attention, a 4-d mask of the
user's) runs that call on transformers' SDPA attention with that mask, as do attention dropout, output_attentions, dtypes other than
float16/bfloat16/float32, head dims above 256 or unequal q/v head dims, a position bias and
inputs off CUDA. Calls with softcap or sinks fall back to the model's own eager attention (SDPA
has neither). Each reason is logged once (logger "kgen.integrations.transformers").

Importing this module needs PyTorch, not transformers: register() imports transformers.
"""
from __future__ import annotations

import logging
import sys
import weakref

import torch

from .. import torch as kgen_torch

__all__ = ["register", "attention_forward", "build_mask"]

logger = logging.getLogger(__name__)

DEVICE_TYPES = ("cuda",)  # where kgen's kernels run; other devices fall back to SDPA
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256  # kgen's limit (kMaxHeadDim, generator/attention_forward.h)
_MASK_FALLBACK = "a padding, packed-sequence or custom attention mask (kgen.torch.attention takes no mask)"

_logged_reasons: set[str] = set()
# id(mask) -> (weak reference, n_q, n_k, sliding window, valid keys) of the masks build_mask built
# as plain but for a window that cuts keys or padding: the layers that get one run on kgen with
# that window, without reading the mask. Valid keys: None, or a padded batch's (b, n_k) bool keys,
# one run per row, which the layers gather into a packed batch for kgen.torch.varlen_attention.
_plain_sliding_masks: dict[int, tuple] = {}


def register(name: str = "kgen") -> str:
    """Register kgen's attention and mask builder in transformers under `name`, so that
    attn_implementation=name (from_pretrained, set_attn_implementation) runs kgen. Returns name."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as error:
        raise ImportError("kgen.integrations.transformers.register() needs Hugging Face transformers "
                          "(pip install transformers)") from error
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, build_mask)
    return name


# --- masks --------------------------------------------------------------------------------------------

def _plain_kind(q_length, kv_length, q_offset, kv_offset, padding, allow_is_causal_skip, local_size, config):
    """(plain, valid keys): whether transformers asks for a causal mask, sliding or not, with
    nothing else in it but padding: no overlay (transformers clears allow_is_causal_skip for custom
    mask functions, packed sequences and compiled decoding) and the last query on the last key
    (bottom-right). Valid keys: None without padded keys; a (b, kv_length) bool tensor when each
    row's valid keys form one run (left or right padding), whose layers run as a packed batch;
    else the mask is not plain."""
    if not allow_is_causal_skip:
        return False, None
    if not (isinstance(q_offset, int) and isinstance(kv_offset, int)) or q_offset + q_length != kv_offset + kv_length:
        return False, None  # a static cache's offsets are tensors and its keys run past the last query
    if local_size is not None and (local_size != getattr(config, "sliding_window", None) or
                                   local_size == getattr(config, "attention_chunk_size", None)):
        return False, None  # chunked attention, or a window other than the config's
    if padding is None:
        return True, None
    if padding.dim() != 2 or torch.compiler.is_compiling():
        return False, None  # reading the padding would break the graph
    from transformers.masking_utils import prepare_padding_mask
    keys = prepare_padding_mask(padding, kv_length, kv_offset)[:, kv_offset:kv_offset + kv_length].bool()
    if bool(keys.all()):
        return True, None
    # One run per row: as many valid keys as from the row's first valid key to its last.
    count = keys.sum(1)
    positions = torch.arange(kv_length, device=keys.device)
    first = torch.where(keys, positions, kv_length).amin(1)
    last = torch.where(keys, positions, -1).amax(1)
    if not bool(((count == 0) | (last - first + 1 == count)).all()):
        return False, None
    return True, keys


def build_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0, mask_function=None,
               attention_mask=None, allow_is_causal_skip: bool = True, local_size: int | None = None,
               config=None, **kwargs):
    """transformers' mask builder for kgen (AttentionMaskInterface): None where the layer's mask
    is plain causal (kgen's causal=True with the layer's window), else the boolean mask
    transformers' sdpa_mask builds, never skipped (the call then runs on SDPA with it). A plain
    sliding-window mask whose window cuts keys is built too and remembered as plain."""
    from transformers import masking_utils

    plain, keys = _plain_kind(q_length, kv_length, q_offset, kv_offset, attention_mask, allow_is_causal_skip,
                              local_size, config)
    if plain and keys is None and (local_size is None or kv_length <= local_size):
        return None  # a window of local_size keys cuts none of kv_length <= local_size keys
    mask = masking_utils.sdpa_mask(
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
        mask_function=masking_utils.causal_mask_function if mask_function is None else mask_function,
        attention_mask=attention_mask, allow_is_causal_skip=False, local_size=local_size, config=config, **kwargs)
    if plain and mask is not None and not torch.compiler.is_compiling():
        key = id(mask)
        forget = weakref.ref(mask, lambda _, key=key: _plain_sliding_masks.pop(key, None))
        window = local_size if local_size is not None and kv_length > local_size else None
        rows = _PaddedRows(keys, q_length) if keys is not None else None
        _plain_sliding_masks[key] = (forget, q_length, kv_length, window, rows)
    return mask


class _PaddedRows:
    """The packed batch of a padded mask whose valid keys `keys` (b, n_k) form one run per row and
    whose queries are the last n_q keys: the valid query and key rows of the flattened (b·n, …)
    tensors, cu_seqlens and the longest lengths. Made once per mask (its host reads included) and
    shared by every layer that runs with it."""

    __slots__ = ("rows_q", "rows_k", "cu_q", "cu_k", "max_q", "max_k")

    def __init__(self, keys: torch.Tensor, n_q: int):
        queries = keys[:, keys.shape[1] - n_q:]
        self.rows_q, self.rows_k = queries.reshape(-1).nonzero().squeeze(1), keys.reshape(-1).nonzero().squeeze(1)
        lens_q, lens_k = queries.sum(1, dtype=torch.int32), keys.sum(1, dtype=torch.int32)
        self.cu_q = torch.nn.functional.pad(lens_q.cumsum(0, dtype=torch.int32), (1, 0))
        self.cu_k = torch.nn.functional.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
        self.max_q, self.max_k = int(lens_q.max()), int(lens_k.max())


def _plain_entry(mask, n_q: int, n_k: int):
    """(window or None, _PaddedRows or None) if build_mask built `mask` as plain for n_q queries and
    n_k keys (a sliding window that cuts keys, or padding in one run per row), else None."""
    if torch.compiler.is_compiling():
        return None
    entry = _plain_sliding_masks.get(id(mask))
    if entry is None or entry[0]() is not mask or entry[1:3] != (n_q, n_k):
        return None
    return entry[3], entry[4]


def _plain_sliding_window(mask, n_q: int, n_k: int) -> int | None:
    """The window of `mask` if build_mask built it as a plain sliding-window mask (no padding) for
    n_q queries and n_k keys, else None."""
    entry = _plain_entry(mask, n_q, n_k)
    return entry[0] if entry is not None and entry[1] is None else None


def _causal_mask(n_q: int, n_k: int, window: int | None, device) -> torch.Tensor:
    """Boolean (1, 1, n_q, n_k), True where kgen's bottom-right causal mask with `window` keeps the key."""
    query_position = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)
    key_position = torch.arange(n_k, device=device)[None, :]
    keep = key_position <= query_position
    if window is not None:
        keep &= key_position > query_position - window
    return keep[None, None]


# --- the attention function ---------------------------------------------------------------------------

def _unsupported(query, key, value, dropout, s_aux, kwargs) -> str | None:
    """Why kgen cannot run this call (one phrase, the log's reason), or None."""
    if query.device.type not in DEVICE_TYPES:
        return f"inputs on {query.device.type} (kgen runs on {', '.join(DEVICE_TYPES)})"
    if kwargs.get("output_attentions", False):
        return "output_attentions=True (kgen returns no attention weights)"
    if dropout:
        return "attention dropout > 0 (kgen has no dropout)"
    if kwargs.get("position_bias") is not None:
        return "a position bias"
    if any(t.dtype not in _DTYPES for t in (query, key, value)):
        return f"dtype {query.dtype} (kgen serves float16, bfloat16 and float32)"
    d = query.shape[-1]
    if key.shape[-1] != d or value.shape[-1] != d or d > _MAX_HEAD_DIM:
        return f"head dims q/k {d}, v {value.shape[-1]} (kgen serves equal head dims <= {_MAX_HEAD_DIM})"
    if query.shape[1] % key.shape[1]:
        return f"{query.shape[1]} query heads over {key.shape[1]} key heads"
    if s_aux is not None and tuple(s_aux.shape) != (query.shape[1],):
        return f"sinks of shape {tuple(s_aux.shape)} (kgen takes one per query head)"
    return None


def attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None, is_causal: bool | None = None,
                      s_aux: torch.Tensor | None = None, **kwargs):
    """transformers' attention function for kgen (AttentionInterface): (attn_output (b, n, h, d)
    contiguous, None) of query (b, h_q, n_q, d), key and value (b, h_kv, n_k, d) on
    kgen.torch.attention, or on transformers' SDPA (the model's eager attention for softcap and
    sinks) where kgen cannot serve the call; see the module's docstring for the mapping."""
    n_q, n_k = query.shape[2], key.shape[2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = sliding_window if causal else None  # a mask-free bidirectional call masks nothing
    reason = _unsupported(query, key, value, dropout, s_aux, kwargs)
    rows = None
    if reason is None and attention_mask is not None:
        entry = _plain_entry(attention_mask, n_q, n_k)
        if entry is None or (entry[0] is None and entry[1] is None):
            reason = _MASK_FALLBACK
        else:
            window, rows = entry
        causal = True  # the mask is causal (plain) or applies as it is (fallback)
    if reason is not None:
        return _fallback(reason, module, query, key, value, attention_mask, dropout, scaling, causal, window, softcap,
                         s_aux, kwargs)
    variant = {}
    if window is not None:
        variant["window"] = (window - 1, 0)
    if softcap:
        variant["softcap"] = float(softcap)
    if s_aux is not None:
        variant["sinks"] = s_aux.float()
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if rows is not None:
        return _padded_attention(q, k, v, rows, scaling, variant), None
    out = kgen_torch.attention(q, k, v, causal=causal, scale=scaling, layout="bnhd", **variant)
    return out.contiguous(), None


def _padded_attention(q, k, v, rows: _PaddedRows, scaling, variant):
    """Causal attention of a padded batch, q (b, n_q, h, d) and k, v (b, n_k, h_kv, d), with the
    packing `rows` of its mask: the valid rows gathered into a packed batch for
    kgen.torch.varlen_attention (differentiable), the output scattered back, 0 in the padded query
    rows. Gathered in order, each row's bottom-right causal mask and window are the padded mask's.
    No host read: the packing's were made once for the mask."""
    b, n_q, h, d = q.shape
    n_k, h_kv = k.shape[1], k.shape[2]
    out = q.new_zeros(b * n_q, h, d)
    if rows.max_q == 0:
        return out.view(b, n_q, h, d)
    packed = kgen_torch.varlen_attention(
        q.reshape(b * n_q, h, d).index_select(0, rows.rows_q), k.reshape(b * n_k, h_kv, d).index_select(0, rows.rows_k),
        v.reshape(b * n_k, h_kv, d).index_select(0, rows.rows_k), rows.cu_q, rows.cu_k, rows.max_q, rows.max_k,
        causal=True, scale=scaling, **variant)
    return out.index_copy(0, rows.rows_q, packed).view(b, n_q, h, d)


def _fallback(reason, module, query, key, value, attention_mask, dropout, scaling, causal, window, softcap, s_aux,
              kwargs):
    """This call on transformers' SDPA attention, or on the model's eager attention where it needs
    softcap, sinks or attention weights, with the mask kgen would have applied made explicit."""
    if reason not in _logged_reasons:
        _logged_reasons.add(reason)
        logger.warning("kgen attention: %s; such calls run on transformers' %s attention instead", reason,
                       "eager" if softcap or s_aux is not None or kwargs.get("output_attentions") else "SDPA")
    if attention_mask is None and causal:
        attention_mask = _causal_mask(query.shape[2], key.shape[2], window, query.device)
    if softcap or s_aux is not None or kwargs.get("output_attentions"):
        eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if eager is None:
            raise NotImplementedError(f"kgen cannot run this attention call ({reason}), and "
                                      f"{type(module).__name__}'s module has no eager_attention_forward to run it")
        if attention_mask is not None and attention_mask.dtype == torch.bool:  # eager adds its mask to the scores
            attention_mask = torch.where(attention_mask, torch.zeros((), dtype=query.dtype, device=query.device),
                                         torch.finfo(query.dtype).min)
        extra = {"softcap": softcap} if softcap else {}
        if s_aux is not None:
            extra["s_aux"] = s_aux
        return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **extra, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=False, **kwargs)
