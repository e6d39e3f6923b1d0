"""GPU time of one training step by kernel, per attention implementation (torch.profiler).

Builds the benchmark's model (bench/transformer/model.py), runs --warmup steps, then profiles
--steps forward + backward steps (bf16 autocast, batch --batch) and prints the total GPU kernel
time per step and the --top kernels by time, one table per implementation. It shows where a
step's GPU time differs between implementations (docs/kernels/measurements.md, "Where the end-to-end
gap went").
Each implementation's attention is first checked on the model's shape (o, dq, dk, dv against the
math reference, as `python3 -m bench.transformer` does); one that fails is reported, not profiled.

    PYTHONPATH=$PWD/python:$PWD KGEN_LIBRARY=$PWD/dist/lib/libkgen.so \\
        python3 -m bench.transformer.profile --model L --context 2048 --impls kgen,sdpa-cudnn
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from . import attention as attn
from .model import MODELS, GPT, VOCAB, loss_fn


def kernel_times(prof, steps: int) -> dict:
    """{kernel name: (ms per step, launches per step)} of a profile of `steps` steps."""
    agg = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += e.device_time_total
            agg[e.name][1] += 1
    return {name: (us / steps / 1000, count // steps) for name, (us, count) in agg.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="L", choices=[m for m in MODELS if m != "tiny"])
    p.add_argument("--context", type=int, default=2048, help="sequence length")
    p.add_argument("--impls", default="kgen,sdpa-cudnn", help=f"comma-separated, of {', '.join(attn.IMPLS)}")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="profiled steps")
    p.add_argument("--top", type=int, default=22, help="kernels listed per implementation")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    from torch.profiler import ProfilerActivity, profile

    size = MODELS[args.model]
    torch.manual_seed(0)
    model = GPT(size, args.context).cuda()
    g = torch.Generator(device="cuda").manual_seed(args.context)
    tokens = torch.randint(VOCAB, (args.batch, args.context + 1), generator=g, device="cuda")
    x, y = tokens[:, :-1], tokens[:, 1:]
    for impl in [s for s in args.impls.split(",") if s]:
        model.attend = attn.make(impl, "cuda")
        checked = attn.check(model.attend, args.batch, args.context, size.heads, size.head_dim, torch.bfloat16, "cuda")
        print(f"\n{impl}: check {'ok' if checked.ok else 'FAIL'} ({checked.summary})")
        if not checked.ok:
            continue

        def step():
            with attn.autocast("cuda", torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            model.zero_grad(set_to_none=True)

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        times = kernel_times(prof, args.steps)
        total = sum(ms for ms, _ in times.values())
        print(f"\n{args.model}, context {args.context}, batch {args.batch}, {impl}: "
              f"GPU kernel time {total:.2f} ms per step ({torch.cuda.get_device_name()})")
        print("| ms per step | launches per step | kernel |\n|---|---|---|")
        for name, (ms, count) in sorted(times.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"| {ms:.3f} | {count} | `{name[:100]}` |")
        model.attend = None


if __name__ == "__main__":
    main()
