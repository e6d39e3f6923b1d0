"""Context parallelism for kgen attention on torch.distributed: ring attention and Ulysses.

A sequence too long for one GPU is split over the ranks of a process group (any group; a
DeviceMesh's dimension gives one with ``mesh.get_group(dim)``). Both functions are differentiable
(torch.autograd.Function) and run kgen's kernels as the local attention.

Tensors are (b, n_local, h, d) ("bnhd"), each rank holding its shard of the sequence.

ring_attention(q, k, v, group=None, causal=False, scale=None, zigzag=True)
    Each rank keeps its queries; the K/V shards travel around the ring (P2P send/recv issued
    before each step's attention, so the copy overlaps the kernel). Each step runs kgen's forward
    with its log-sum-exp, and the partial outputs merge by their LSEs into the exact softmax over
    the whole sequence. The backward sends dK/dV around the ring with the K/V they belong to and
    runs kgen's backward with the merged output and LSE. Causal attention needs a load-balanced
    split: with zigzag=True (the default) the sequence is cut into 2·P chunks and rank r holds
    chunks r and 2P − 1 − r (zigzag_shard / zigzag_unshard make and undo that split), so every
    rank does the same work; zigzag=False takes contiguous shards (rank r holds chunk r), where
    the last rank does P times the first's work.

ulysses_attention(q, k, v, group=None, causal=False, scale=None, **variant)
    All-to-all from sequence shards to head shards (each rank gets the whole sequence for h / P
    of the heads), kgen.torch.attention there (variants included: per-head tensors such as
    alibi_slopes and sinks are sliced to the rank's heads), and all-to-all back. Needs h_q and
    h_kv divisible by P and contiguous shards.

The local attention is kgen's (kgen.torch) unless ``set_local_attention`` installs another with
the same contract (the CPU tests use a float64 reference).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import torch as kgen_torch

__all__ = ["ring_attention", "ulysses_attention", "zigzag_shard", "zigzag_unshard", "set_local_attention"]


class _KgenLocal:
    """The local attention of both schemes: kgen's operators on (b, n, h, d) tensors."""

    @staticmethod
    def forward(q, k, v, causal: bool, scale: float):
        """(o, lse): o like q, lse fp32 (b, h, n_q)."""
        return kgen_torch.attention_forward(q, k, v, causal=causal, scale=scale, layout="bnhd", return_lse=True)

    @staticmethod
    def backward(q, k, v, o, lse, d_o, causal: bool, scale: float):
        """(dq, dk, dv) given the output o and lse of the whole softmax these rows belong to."""
        return kgen_torch.attention_backward(q, k, v, o, lse, d_o, causal=causal, scale=scale, layout="bnhd")

    @staticmethod
    def attention(q, k, v, causal: bool, scale: float, **variant):
        """Differentiable attention (Ulysses' local step)."""
        return kgen_torch.attention(q, k, v, causal=causal, scale=scale, layout="bnhd", **variant)


_local = _KgenLocal()


def set_local_attention(local=None):
    """Installs `local` (an object with forward, backward and attention as _KgenLocal's) as the
    local attention of both schemes; None restores kgen's. Returns the previous one."""
    global _local
    previous, _local = _local, (local if local is not None else _KgenLocal())
    return previous


def _group_info(group):
    return dist.get_rank(group), dist.get_world_size(group)


def _check(q, k, v, name: str):
    for t, arg in ((q, "q"), (k, "k"), (v, "v")):
        if t.dim() != 4:
            raise ValueError(f"{name}: {arg} must be (b, n_local, h, d), got shape {tuple(t.shape)}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"{name}: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not form one "
                         "attention call")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"{name}: {q.shape[2]} query heads over {k.shape[2]} key heads")


# --- sharding ------------------------------------------------------------------------------------

def zigzag_shard(x: torch.Tensor, rank: int, world: int, dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s zigzag shard of the whole sequence `x` along `dim`: chunks rank and
    2·world − 1 − rank of 2·world equal chunks (the length must divide by 2·world)."""
    n = x.shape[dim]
    if n % (2 * world):
        raise ValueError(f"zigzag_shard: sequence length {n} is not a multiple of 2·world = {2 * world}")
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(shards, dim: int = 1) -> torch.Tensor:
    """The whole sequence from every rank's zigzag shard (in rank order)."""
    world = len(shards)
    chunks = [None] * (2 * world)
    for r, s in enumerate(shards):
        first, second = s.chunk(2, dim=dim)
        chunks[r], chunks[2 * world - 1 - r] = first, second
    return torch.cat(chunks, dim=dim)


# --- ring attention ------------------------------------------------------------------------------

class _Ring:
    """The ring's P2P: sends this rank's buffers to the next rank and receives the previous
    rank's, started at once and waited for later (overlapping the step's attention)."""

    def __init__(self, group):
        self.group = group
        self.rank, self.world = _group_info(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world) if group is not None else \
            (self.rank + 1) % self.world
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world) if group is not None else \
            (self.rank - 1) % self.world

    def start(self, tensors):
        """Starts passing `tensors` on; returns (received buffers, pending exchange). One rank
        passes them to itself without copying."""
        if self.world == 1:
            return list(tensors), ()
        sent = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in sent]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in sent]
        ops += [dist.P2POp(dist.irecv, r, self.prev, self.group) for r in received]
        return received, (sent, dist.batch_isend_irecv(ops))

    @staticmethod
    def wait(pending):
        """Waits for an exchange (the sent buffers stay referenced until then)."""
        if pending:
            for request in pending[1]:
                request.wait()


def _ring_blocks(rank: int, source: int, n_q: int, n_k: int, causal: bool, zigzag: bool):
    """The attention of this rank's queries against the K/V shard of rank `source`: a list of
    (query rows slice, key rows slice, causal) blocks, empty where nothing is visible."""
    everything = (slice(0, n_q), slice(0, n_k), False)
    if not causal:
        return [everything]
    if source == rank:
        return [(slice(0, n_q), slice(0, n_k), True)]
    if not zigzag:  # contiguous shards: earlier ranks' keys are all visible, later ones' none
        return [everything] if source < rank else []
    half_q, half_k = n_q // 2, n_k // 2
    if source < rank:  # its first chunk precedes both of ours, its second follows both
        return [(slice(0, n_q), slice(0, half_k), False)]
    return [(slice(half_q, n_q), slice(0, n_k), False)]  # both its chunks precede our second only


def _merge(out, lse, rows, o_part, lse_part):
    """Merges a partial (o_part, lse_part) of query rows `rows` into the running fp32 out (b, n,
    h, d) and lse (b, h, n): the softmax over the union of their keys."""
    o_rows, lse_rows = out[:, rows], lse[:, :, rows]
    new = torch.logaddexp(lse_rows, lse_part)
    # A row with no key yet (−inf) or no key in this part (−inf): weights 0, never NaN.
    finite = torch.isfinite(new)
    w_old = torch.where(finite, torch.exp(lse_rows - new), torch.zeros_like(new))
    w_new = torch.where(finite, torch.exp(lse_part - new), torch.zeros_like(new))
    o_rows.copy_(o_rows * w_old.transpose(1, 2).unsqueeze(-1) + o_part.to(o_rows.dtype) * w_new.transpose(1, 2).unsqueeze(-1))
    lse_rows.copy_(new)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal, scale, zigzag):
        ring = _Ring(group)
        b, n_q, h, d = q.shape
        acc = torch.promote_types(q.dtype, torch.float32)  # the merge's precision: fp32 (fp64 for fp64 inputs)
        out = torch.zeros(b, n_q, h, d, device=q.device, dtype=acc)
        lse = torch.full((b, h, n_q), -math.inf, device=q.device, dtype=acc)
        kv = [k, v]
        for step in range(ring.world):
            pending = ring.start(kv) if step + 1 < ring.world else None
            source = (ring.rank - step) % ring.world
            for rows, keys, block_causal in _ring_blocks(ring.rank, source, n_q, k.shape[1], causal, zigzag):
                o_part, lse_part = _local.forward(q[:, rows], kv[0][:, keys], kv[1][:, keys], block_causal, scale)
                _merge(out, lse, rows, o_part, lse_part)
            if pending is not None:
                kv, exchange = pending
                _Ring.wait(exchange)
        o = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.group, ctx.causal, ctx.scale, ctx.zigzag = group, causal, scale, zigzag
        return o

    @staticmethod
    def backward(ctx, d_o):
        q, k, v, o, lse = ctx.saved_tensors
        ring = _Ring(ctx.group)
        d_o = d_o.contiguous()
        acc = torch.promote_types(q.dtype, torch.float32)
        dq = torch.zeros(q.shape, device=q.device, dtype=acc)
        # K/V and their gradients' accumulators travel together; after the last step one more
        # pass brings each shard's dK/dV home.
        kv = [k, v, torch.zeros(k.shape, device=k.device, dtype=acc), torch.zeros(v.shape, device=v.device, dtype=acc)]
        n_q, n_k = q.shape[1], k.shape[1]
        for step in range(ring.world):
            # The next K/V travel under this step's kernels; the dK/dV accumulators once they
            # hold this step's part (after the last step, home to their shard's rank).
            pending_kv = ring.start(kv[:2]) if step + 1 < ring.world else None
            source = (ring.rank - step) % ring.world
            for rows, keys, block_causal in _ring_blocks(ring.rank, source, n_q, n_k, ctx.causal, ctx.zigzag):
                dq_part, dk_part, dv_part = _local.backward(
                    q[:, rows], kv[0][:, keys], kv[1][:, keys], o[:, rows], lse[:, :, rows], d_o[:, rows],
                    block_causal, ctx.scale)
                dq[:, rows] += dq_part.to(acc)
                kv[2][:, keys] += dk_part.to(acc)
                kv[3][:, keys] += dv_part.to(acc)
            grads, pending_grads = ring.start(kv[2:])
            _Ring.wait(pending_grads)
            if pending_kv is not None:
                _Ring.wait(pending_kv[1])
                kv = pending_kv[0] + grads
            else:
                kv = grads
        dk, dv = kv[-2], kv[-1]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def ring_attention(q, k, v, group=None, causal: bool = False, scale: float | None = None, zigzag: bool = True):
    """Attention over the sequence split across `group`'s ranks (see the module docstring): q, k,
    v (b, n_local, h, d) this rank's shard; returns this rank's rows of o. Differentiable."""
    _check(q, k, v, "ring_attention")
    if causal and zigzag and (q.shape[1] % 2 or k.shape[1] % 2):
        raise ValueError(f"ring_attention: zigzag shards hold two equal chunks; n_local {q.shape[1]} is odd")
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError(f"ring_attention: causal shards need as many queries as keys, got {q.shape[1]} and "
                         f"{k.shape[1]}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _RingAttention.apply(q, k, v, group, causal, scale, zigzag)


# --- Ulysses --------------------------------------------------------------------------------------

def _seq_to_heads(x, group, world: int):
    """(b, n_local, h, d) sequence shards → (b, n_local·world, h / world, d) head shards."""
    b, n, h, d = x.shape
    send = x.reshape(b, n, world, h // world, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s]: rank s's rows of our heads
    return recv.permute(1, 0, 2, 3, 4).reshape(b, world * n, h // world, d)


def _heads_to_seq(x, group, world: int):
    """The inverse of _seq_to_heads."""
    b, n_all, hp, d = x.shape
    n = n_all // world
    send = x.reshape(b, world, n, hp, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s]: our rows of rank s's heads
    return recv.permute(1, 2, 0, 3, 4).reshape(b, n, world * hp, d)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, world, to_heads):
        ctx.group, ctx.world, ctx.to_heads = group, world, to_heads
        return (_seq_to_heads if to_heads else _heads_to_seq)(x, group, world)

    @staticmethod
    def backward(ctx, grad):
        back = _heads_to_seq if ctx.to_heads else _seq_to_heads
        return back(grad.contiguous(), ctx.group, ctx.world), None, None, None


def ulysses_attention(q, k, v, group=None, causal: bool = False, scale: float | None = None, **variant):
    """Attention over the sequence split across `group`'s ranks by all-to-all to head shards (see
    the module docstring): q, k, v (b, n_local, h, d) this rank's contiguous shard; returns this
    rank's rows of o. Differentiable; variants as kgen.torch.attention."""
    _check(q, k, v, "ulysses_attention")
    rank, world = _group_info(group)
    for t, arg in ((q, "q"), (k, "k")):
        if t.shape[2] % world:
            raise ValueError(f"ulysses_attention: {arg} has {t.shape[2]} heads, not a multiple of the group's "
                             f"{world} ranks")
    heads = q.shape[2] // world
    for name in ("alibi_slopes", "sinks"):  # per query head: this rank's heads
        if variant.get(name) is not None:
            variant[name] = variant[name][rank * heads:(rank + 1) * heads]
    qh, kh, vh = (_AllToAll.apply(t, group, world, True) for t in (q, k, v))
    o = _local.attention(qh, kh, vh, causal, scale, **variant)
    return _AllToAll.apply(o.contiguous(), group, world, False)
