"""kgen.distributed without a GPU: ring attention (zigzag and contiguous shards, causal or not, GQA)
and Ulysses on 1–4 CPU processes over gloo, with a float64 reference as the local attention. Each
rank's output rows and its shards' gradients must match attention over the whole sequence (float64
autograd) to 1e-10: the ring's LSE merge, its dK/dV return trip and the all-to-alls are exact."""
import math
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

from kgen import distributed as kd  # noqa: E402


def _scores(q, k, causal, scale):
    """Scaled scores (b, h, n_q, n_k) of (b, n, h, d) float64 tensors, GQA by repeated heads,
    bottom-right causal mask."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        n_q, n_k = q.shape[1], k.shape[1]
        keep = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + (n_k - n_q)
        s = s.masked_fill(~keep, -math.inf)
    return s


def reference_attention(q, k, v, causal, scale, **variant):
    """Differentiable float64 attention of (b, n, h, d) tensors."""
    assert not variant
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[2] // k.shape[2]
    p = torch.softmax(_scores(q, k, causal, scale), dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, v.repeat_interleave(group, dim=2))


class ReferenceLocal:
    """kgen.distributed's local-attention contract in float64 (no GPU)."""

    @staticmethod
    def forward(q, k, v, causal, scale):
        s = _scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        group = q.shape[2] // k.shape[2]
        return torch.einsum("bhqk,bkhd->bqhd", p, v.repeat_interleave(group, dim=2)), lse

    @staticmethod
    def backward(q, k, v, o, lse, d_o, causal, scale):
        group = q.shape[2] // k.shape[2]
        kr, vr = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        p = torch.exp(_scores(q, k, causal, scale) - lse[..., None]).nan_to_num(0.0)
        dv = torch.einsum("bhqk,bqhd->bkhd", p, d_o)
        dp = torch.einsum("bqhd,bkhd->bhqk", d_o, vr)
        delta = (d_o * o).sum(-1).transpose(1, 2)[..., None]
        ds = p * (dp - delta)
        dq = torch.einsum("bhqk,bkhd->bqhd", ds, kr) * scale
        dk = torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale

        def fold(x):  # sum over each kv head's query heads
            b, n, _, d = x.shape
            return x.reshape(b, n, k.shape[2], group, d).sum(3)
        return dq, fold(dk), fold(dv)

    @staticmethod
    def attention(q, k, v, causal, scale, **variant):
        return reference_attention(q, k, v, causal, scale, **variant)


# (scheme, causal, zigzag, h_q, h_kv): every case one world runs in one process group.
CASES = [("ring", False, True, 4, 2), ("ring", True, True, 4, 2), ("ring", True, False, 4, 2),
         ("ulysses", False, False, 8, 4), ("ulysses", True, False, 8, 4)]


def _case(rank, world, scheme, causal, zigzag, heads, heads_kv):
    gen = torch.Generator().manual_seed(7)
    b, n, d = 2, 12 * world, 16
    q = torch.randn(b, n, heads, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, n, heads_kv, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, n, heads_kv, d, generator=gen, dtype=torch.float64)
    g = torch.randn(b, n, heads, d, generator=gen, dtype=torch.float64)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    want = reference_attention(*full, causal, None)
    want_grads = torch.autograd.grad(want, full, g)

    if scheme == "ring" and causal and zigzag:
        shard = lambda x: kd.zigzag_shard(x, rank, world)  # noqa: E731
    else:
        shard = lambda x: x.chunk(world, dim=1)[rank]  # noqa: E731
    mine = [shard(t).clone().requires_grad_() for t in (q, k, v)]
    if scheme == "ring":
        got = kd.ring_attention(*mine, causal=causal, zigzag=zigzag)
    else:
        got = kd.ulysses_attention(*mine, causal=causal)
    got_grads = torch.autograd.grad(got, mine, shard(g))
    label = f"{scheme} causal={causal} zigzag={zigzag} world={world} rank={rank}"
    torch.testing.assert_close(got, shard(want), rtol=1e-10, atol=1e-10, msg=lambda m: f"{label} o: {m}")
    for name, a, w in zip("qkv", got_grads, want_grads):
        torch.testing.assert_close(a, shard(w), rtol=1e-10, atol=1e-10, msg=lambda m, name=name: f"{label} d{name}: {m}")


def _run(rank, world, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        kd.set_local_attention(ReferenceLocal())
        for case in CASES:
            if case[0] == "ulysses" and case[4] % world:
                continue  # Ulysses needs the heads to divide over the ranks
            _case(rank, world, *case)
    finally:
        kd.set_local_attention(None)
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_and_ulysses_match_attention_over_the_whole_sequence(tmp_path, world):
    """Every case of CASES on `world` CPU processes (one process group)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_run, args=(world, f"file://{tmp_path}/rendezvous"), nprocs=world, join=True)


def test_zigzag_shards_round_trip():
    x = torch.arange(2 * 3 * 16).reshape(2, 48, 1)
    shards = [kd.zigzag_shard(x, r, 3) for r in range(3)]
    assert shards[0][0, :8, 0].tolist() == list(range(0, 8))  # chunk 0, then chunk 5
    assert shards[0][0, 8:, 0].tolist() == list(range(40, 48))
    assert torch.equal(kd.zigzag_unshard(shards), x)
    with pytest.raises(ValueError, match="multiple of 2·world"):
        kd.zigzag_shard(x[:, :47], 0, 3)


def test_bad_arguments_are_named():
    q = torch.zeros(1, 4, 2, 8)
    with pytest.raises(ValueError, match="ring_attention: q must be"):
        kd.ring_attention(q[0], q, q)
    with pytest.raises(ValueError, match="3 query heads over 2 key heads"):
        kd.ring_attention(torch.zeros(1, 4, 3, 8), q, q)
