#!/usr/bin/env python3
"""Context parallelism on several GPUs of one host: kgen.distributed's ring and Ulysses attention
against PyTorch's own context parallelism (torch.distributed.tensor.experimental.context_parallel,
SDPA's cuDNN or flash backend inside), and each against one GPU running the whole sequence.

A row is one total sequence length N (b = 1, causal, bf16, h = --heads, d = --head-dim) on P
GPUs. A step is the forward and the backward of one attention layer on the rank's shard:
  kgen-ring     kgen.distributed.ring_attention, zigzag shards (P = 1: kgen.torch.attention)
  kgen-ulysses  kgen.distributed.ulysses_attention, contiguous shards (P = 1: the same as ring)
  cp-cudnn      SDPA under context_parallel with the cuDNN backend (P = 1: SDPA cuDNN)
  cp-flash      the same with the flash backend
Every rank times each step with CUDA events; a step's time is the slowest rank's; the table gives
the median over --reps steps, the implementations interleaved in rounds. Before timing, each
implementation's output rows on every rank are checked against kgen.torch.attention over the whole
sequence (relative L2 ≤ 2e-2; FAIL: no time). "eff" is the scaling efficiency T₁(N) / (P·T_P(N)),
T₁ the same implementation on one GPU: 100 % means P GPUs finish the same sequence P times faster;
with N growing as P it is the weak-scaling efficiency. "kgen/cp" is cp-cudnn's (or cp-flash's, the
faster) time over kgen-ring's at the same P (> 1: kgen faster).

    python3 bench/scale_context_parallel.py --gpus 1,2 --seqlens 64k,128k
    python3 bench/scale_context_parallel.py --gpus 1,2,4 --seqlens 64k,128k,256k --out scaling.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kgen.torch  # noqa: E402
from rounds import size, write_table  # noqa: E402
from kgen import distributed as kd  # noqa: E402

IMPLS = ("kgen-ring", "kgen-ulysses", "cp-cudnn", "cp-flash")
REL_L2_BOUND = 2e-2


def _rel(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _backend(name: str):
    from torch.nn.attention import SDPBackend
    return SDPBackend.CUDNN_ATTENTION if name == "cp-cudnn" else SDPBackend.FLASH_ATTENTION


def _kgen_step(impl: str, world: int, q, k, v, g):
    """A step closure over this rank's (b, n_local, h, d) shards, and the shard function it used."""
    if world == 1:
        run = lambda a, b_, c: kgen.torch.attention(a, b_, c, causal=True, layout="bnhd")  # noqa: E731
    elif impl == "kgen-ring":
        run = lambda a, b_, c: kd.ring_attention(a, b_, c, causal=True, zigzag=True)  # noqa: E731
    else:
        run = lambda a, b_, c: kd.ulysses_attention(a, b_, c, causal=True)  # noqa: E731
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def step():
        o = run(*leaves)
        torch.autograd.grad(o, leaves, g)
        return o
    return step


def _torch_step(impl: str, q, k, v, g):
    """SDPA on (b, h, n_local, d) views of this rank's shards (contiguous in bnhd), forward and backward."""
    from torch.nn.attention import sdpa_kernel
    leaves = [t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v)]
    gt = g.transpose(1, 2)

    def step():
        with sdpa_kernel([_backend(impl)]):
            o = F.scaled_dot_product_attention(*leaves, is_causal=True)
            torch.autograd.grad(o, leaves, gt)
        return o.transpose(1, 2)
    return step


def _timed(step) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    step()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e)


def _rank(rank: int, world: int, init: str, args, queue):
    torch.cuda.set_device(rank)
    if world > 1:
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    try:
        for n in args.seqlens:
            _row(rank, world, n, args, queue)
    finally:
        if world > 1:
            dist.destroy_process_group()


def _row(rank: int, world: int, n: int, args, queue):
    h, d = args.heads, args.head_dim
    gen = torch.Generator(device="cuda").manual_seed(5)
    full = [torch.randn(1, n, h, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    q, k, v, g = full
    with torch.no_grad():
        want = kgen.torch.attention(q, k, v, causal=True, layout="bnhd")
    zig = (lambda x: kd.zigzag_shard(x, rank, world).contiguous()) if world > 1 else (lambda x: x)  # noqa: E731
    flat = (lambda x: x.chunk(world, dim=1)[rank].contiguous()) if world > 1 else (lambda x: x)  # noqa: E731
    steps, shards, notes = {}, {}, {}
    cp = None
    for impl in args.impls:
        if world == 1 and impl == "kgen-ulysses":
            continue  # one GPU: the same call as kgen-ring (main copies its time)
        try:
            if impl.startswith("kgen"):
                shard = zig if impl == "kgen-ring" or world == 1 else flat
                steps[impl] = _kgen_step(impl, world, *(shard(t) for t in full))
            else:
                if world > 1 and cp is None:
                    from torch.distributed.device_mesh import init_device_mesh
                    from torch.distributed.tensor.experimental import context_parallel
                    mesh = init_device_mesh("cuda", (world,))
                    # context_parallel shards its buffers in place, in its own load-balanced order;
                    # the reference rows travel as a fourth buffer, so they are cut the same way.
                    bufs = [t.transpose(1, 2).contiguous() for t in (q, k, v, g, want)]
                    cp = context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2] * 5)
                    cp.__enter__()
                    cp_shards = [t.transpose(1, 2) for t in bufs]
                if world > 1:
                    shard_q, shard_k, shard_v, shard_g, shard_want = cp_shards
                    steps[impl] = _torch_step(impl, shard_q, shard_k, shard_v, shard_g)
                    shards[impl] = shard_want
                else:
                    steps[impl] = _torch_step(impl, q, k, v, g)
            if impl not in shards:
                shards[impl] = (zig if impl == "kgen-ring" or world == 1 or not impl.startswith("kgen") else flat)(want)
            o = steps[impl]()
            err = _rel(o, shards[impl])
            errs = torch.tensor([err], device="cuda")
            if world > 1:
                dist.all_reduce(errs, op=dist.ReduceOp.MAX)
            if float(errs) > REL_L2_BOUND:
                notes[impl] = f"FAIL (rel L2 {float(errs):.1e})"
                del steps[impl]
        except Exception as e:  # a peer that cannot run this row: say why, time the rest
            notes[impl] = f"– ({type(e).__name__}: {str(e).splitlines()[0][:90]})"
            steps.pop(impl, None)
        torch.cuda.synchronize()
    times = {impl: [] for impl in steps}
    names = list(steps)
    for impl in names:
        for _ in range(args.warmup):
            steps[impl]()
    torch.cuda.synchronize()
    for r in range(args.reps):
        shift = r % max(1, len(names))
        for impl in names[shift:] + names[:shift]:
            if world > 1:
                dist.barrier()
            t = torch.tensor([_timed(steps[impl])], device="cuda")
            if world > 1:
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times[impl].append(float(t))
    if cp is not None:
        cp.__exit__(None, None, None)
    if rank == 0:
        queue.put((world, n, {impl: statistics.median(ts) for impl, ts in times.items()}, notes))
    del steps, full, want
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--gpus", default="1,2", help="GPU counts P, comma-separated (1 is the baseline of 'eff')")
    ap.add_argument("--seqlens", default="64k,128k", help="total sequence lengths N, comma-separated")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default="", help="also write the table (markdown) here")
    args = ap.parse_args()
    args.seqlens = [size(s) for s in args.seqlens.split(",")]
    args.impls = [s for s in args.impls.split(",") if s]
    for s in args.impls:
        if s not in IMPLS:
            ap.error(f"--impls: unknown implementation {s!r} (choose from {', '.join(IMPLS)})")
    gpus = [int(s) for s in args.gpus.split(",")]
    if max(gpus) > torch.cuda.device_count():
        ap.error(f"--gpus: {max(gpus)} GPUs asked, {torch.cuda.device_count()} visible")
    for n in args.seqlens:
        for p in gpus:
            if n % (2 * p):
                ap.error(f"--seqlens: N = {n} does not split into {2 * p} equal chunks for P = {p}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results, notes = {}, {}
    ctx = mp.get_context("spawn")
    for p in gpus:
        queue = ctx.Queue()
        with tempfile.TemporaryDirectory() as tmp:
            print(f"P = {p}: {len(args.seqlens)} rows ...", file=sys.stderr, flush=True)
            procs = [ctx.Process(target=_rank, args=(r, p, f"file://{tmp}/rendezvous", args, queue)) for r in range(p)]
            for proc in procs:
                proc.start()
            for _ in args.seqlens:
                while True:
                    try:
                        world, n, times, why = queue.get(timeout=30)
                        break
                    except Exception:
                        if any(proc.exitcode not in (None, 0) for proc in procs):
                            for proc in procs:
                                proc.kill()
                            sys.exit(f"P = {p}: a rank failed (its traceback is above)")
                if world == 1 and "kgen-ring" in times and "kgen-ulysses" in args.impls:
                    times["kgen-ulysses"] = times["kgen-ring"]
                results[(world, n)], notes[(world, n)] = times, why
            for proc in procs:
                proc.join()
                if proc.exitcode:
                    sys.exit(f"P = {p}: a rank exited with {proc.exitcode}")
    dev = torch.cuda.get_device_name(0)
    lines = [f"device: {torch.cuda.device_count()} × {dev}; torch {torch.__version__}; bf16; causal; b = 1, "
             f"h = {args.heads}, d = {args.head_dim}; forward + backward per step, median ms of the slowest rank", "",
             "| N | P | " + " | ".join(f"{i} ms | eff" for i in args.impls) + " | kgen/cp |",
             "|---|---|" + "---|---|" * len(args.impls) + "---|"]
    for n in args.seqlens:
        for p in gpus:
            times, why = results[(p, n)], notes[(p, n)]
            cells = []
            for impl in args.impls:
                if impl not in times:
                    cells += [why.get(impl, "–"), "–"]
                    continue
                base = results.get((1, n), {}).get(impl)
                eff = f"{100 * base / (p * times[impl]):.0f} %" if base else "–"
                cells += [f"{times[impl]:.2f}", eff]
            cp = [times[i] for i in ("cp-cudnn", "cp-flash") if i in times]
            ratio = f"{min(cp) / times['kgen-ring']:.2f}" if cp and "kgen-ring" in times else "–"
            lines.append(f"| {n // 1024}k | {p} | " + " | ".join(cells) + f" | {ratio} |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
