"""kgen.distributed on several GPUs of one host (NCCL), kgen's kernels as the local attention: each
rank's output rows and its shards' gradients (bf16) against single-GPU kgen over the whole
sequence, for ring attention (zigzag causal, contiguous causal, non-causal, GQA) and Ulysses.
Skips without two GPUs."""
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA GPUs", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import kgen.torch  # noqa: E402
from kgen import distributed as kd  # noqa: E402

# bf16 outputs and gradients against single-GPU kgen: relative L2 of the whole shard.
REL_L2 = 2e-2


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def _run(rank, world, init, scheme, causal, zigzag):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    try:
        gen = torch.Generator(device="cuda").manual_seed(11)
        b, n, h, h_kv, d = 1, 2048 * world, 16, 4, 128
        q, k, v, g = (torch.randn(b, n, hh, d, generator=gen, device="cuda", dtype=torch.bfloat16)
                      for hh in (h, h_kv, h_kv, h))
        full = [t.clone().requires_grad_() for t in (q, k, v)]
        want = kgen.torch.attention(*full, causal=causal, layout="bnhd")
        want_grads = torch.autograd.grad(want, full, g)
        if scheme == "ring" and causal and zigzag:
            shard = lambda x: kd.zigzag_shard(x, rank, world)  # noqa: E731
        else:
            shard = lambda x: x.chunk(world, dim=1)[rank]  # noqa: E731
        mine = [shard(t).contiguous().requires_grad_() for t in (q, k, v)]
        if scheme == "ring":
            got = kd.ring_attention(*mine, causal=causal, zigzag=zigzag)
        else:
            got = kd.ulysses_attention(*mine, causal=causal)
        got_grads = torch.autograd.grad(got, mine, shard(g).contiguous())
        assert _rel(got, shard(want)) < REL_L2, f"rank {rank} o: {_rel(got, shard(want)):.2e}"
        for name, a, w in zip("qkv", got_grads, want_grads):
            assert _rel(a, shard(w)) < REL_L2, f"rank {rank} d{name}: {_rel(a, shard(w)):.2e}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("scheme,causal,zigzag", [("ring", True, True), ("ring", True, False), ("ring", False, True),
                                                  ("ulysses", True, False)])
@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_matches_one_gpu(tmp_path, world, scheme, causal, zigzag):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_run, args=(world, f"file://{tmp_path}/rendezvous", scheme, causal, zigzag), nprocs=world, join=True)
