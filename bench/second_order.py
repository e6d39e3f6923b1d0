#!/usr/bin/env python3
"""A second-order step through attention: kgen's double backward against PyTorch's math path.

The step is MAML's (or test-time training's): one inner gradient step on a support sequence with
create_graph=True, then the loss of the adapted weights on a query sequence and its gradient with
respect to the original weights, which differentiates through the inner gradient and so through
attention's backward. The model is one causal attention layer (float32 q, k, v and output
projections, b=1, --heads heads of --head-dim; attention in --dtype). kgen runs it with kgen.torch.attention (its backward is kgen's
backward kernel, differentiated by kgen's double-backward kernel, O(n·d) memory); the reference
runs it with torch.nn.functional.scaled_dot_product_attention on the math backend (n×n scores,
differentiable twice by autograd).

Before timing, at every n, both are checked against a float32 math-path run on the same weights
and inputs (if that one fits in memory, else against each other): the outer loss, the outer
gradients, and the inner loss's Hessian times a random direction (all of which passes through
attention's double backward; the outer gradient's second-order part is small at a small inner
learning rate). Then the median time of a whole step over --reps steps after --warmup, and the peak
memory of one step above what was allocated before it. torch.compile cannot take this step:
aot_autograd refuses double backward, so it runs eagerly.

    python3 bench/second_order.py                  # n = 2k, 4k, 8k, 16k, bf16
    python3 bench/second_order.py --quick          # n = 1k, 2k, two reps: a check that it runs
    python3 bench/second_order.py --dtype fp16 --seqlens 4k --heads 8 --out second_order.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rounds import sizes  # noqa: E402

WEIGHTS = ("w_q", "w_k", "w_v", "w_o")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqlens", type=sizes, default=sizes("2k,4k,8k,16k"), help="n of the support and query sequences")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--inner-lr", type=float, default=0.1)
    p.add_argument("--bound", type=float, default=2e-2,
                   help="rel_l2 bound of every checked result (16-bit second order: python/tests/test_autograd_gpu.py)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="n = 1k, 2k and two reps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    args = p.parse_args()
    if args.quick:
        args.seqlens, args.reps, args.warmup = sizes("1k,2k"), 2, 1
    return args


class Step:
    """One MAML step of a causal attention layer with the float32 weights `params` (w_q, w_k, w_v,
    w_o): projections in float32, attention on q, k, v cast to `dtype` (what autocast would run)."""

    def __init__(self, torch, attention, args, dtype):
        self.torch, self.attention, self.args, self.dtype = torch, attention, args, dtype

    def layer(self, params, x):
        b, n, width = x.shape
        h, d = self.args.heads, self.args.head_dim
        w_q, w_k, w_v, w_o = params
        q, k, v = ((x @ w).view(b, n, h, d).to(self.dtype) for w in (w_q, w_k, w_v))  # bnhd
        return self.attention(q, k, v).reshape(b, n, width).float() @ w_o

    def loss(self, params, x, y):
        return (self.layer(params, x) - y).square().mean()

    def __call__(self, params, support, query):
        """(outer loss, outer gradients with respect to params)."""
        grad = self.torch.autograd.grad
        inner = self.loss(params, *support)
        steps = grad(inner, params, create_graph=True)
        adapted = [p - self.args.inner_lr * g for p, g in zip(params, steps)]
        outer = self.loss(adapted, *query)
        return outer.detach(), grad(outer, params)

    def hessian_vector_product(self, params, support, direction):
        """H·direction for the inner loss's Hessian H: all of it passes through attention's double
        backward, which the outer gradient's second-order part (lr·H·∇L_query) rests on."""
        grad = self.torch.autograd.grad
        steps = grad(self.loss(params, *support), params, create_graph=True)
        return grad(sum((g * u).sum() for g, u in zip(steps, direction)), params)

    def results(self, params, support, query, direction) -> dict:
        """What is checked: the outer loss, the outer gradients and the Hessian-vector products."""
        loss, grads = self(params, support, query)
        out = {"outer loss": loss.reshape(1)}
        out.update({f"outer d{name}": g for name, g in zip(WEIGHTS, grads)})
        hvp = self.hessian_vector_product(params, support, direction)
        out.update({f"H·u {name}": h for name, h in zip(WEIGHTS, hvp)})
        return out


def make_attentions(torch, kgen):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def kgen_attention(q, k, v):
        return kgen.torch.attention(q, k, v, causal=True, layout="bnhd")

    def math_attention(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            o = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                                                 is_causal=True)
        return o.transpose(1, 2)

    return {"kgen": kgen_attention, "math": math_attention}


def problem(torch, args, n):
    """float32 weights (leaves) and (x, target) of the support and query sequences."""
    g = torch.Generator(device="cuda").manual_seed(args.seed + n)
    width = args.heads * args.head_dim

    def randn(*shape, scale=1.0):
        return torch.randn(shape, device="cuda", generator=g) * scale

    params = [randn(width, width, scale=width ** -0.5).requires_grad_(True) for _ in range(4)]
    return params, (randn(1, n, width), randn(1, n, width)), (randn(1, n, width), randn(1, n, width))


def run_checked(torch, run):
    """run()'s results, or "OOM"."""
    try:
        return run()
    except torch.cuda.OutOfMemoryError:
        return "OOM"
    finally:
        torch.cuda.empty_cache()


def measure(torch, step, params, support, query, args):
    """(median ms of a step, peak MiB of one step above the memory allocated before it)."""
    for _ in range(args.warmup):
        step(params, support, query)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        step(params, support, query)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(params, support, query)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    return statistics.median(times), peak


def row(torch, compare, steps, reference_step, args, n) -> str:
    """The table row at n: check both implementations, then time those that passed."""
    params, support, query = problem(torch, args, n)
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    direction = [torch.randn(p.shape, device="cuda", generator=g) for p in params]
    results = {name: run_checked(torch, lambda: step.results(params, support, query, direction))
               for name, step in steps.items()}
    reference = run_checked(torch, lambda: reference_step.results(params, support, query, direction))
    if reference == "OOM":
        label, pairs = "kgen vs math", [] if "OOM" in results.values() else [("kgen", results["math"])]
    else:
        label, pairs = "vs fp32 math", [(name, reference) for name, r in results.items() if r != "OOM"]
    checks = [(name, compare(f"{name}: {key}", results[name][key], ref[key], bound=args.bound))
              for name, ref in pairs for key in ref]
    failed = {name for name, c in checks if not c.ok}
    if failed and label == "kgen vs math":
        failed.add("math")  # either may be wrong
    for _, c in checks:
        if not c.ok:
            print(f"n={n}: {c}", flush=True)
    oom = {name for name, r in results.items() if r == "OOM"}
    results = reference = None  # free them before timing
    cells = {}
    for name, step in steps.items():
        if name in oom:
            cells[name] = ("OOM", "OOM")
        elif name in failed:
            cells[name] = ("FAIL", "FAIL")
        else:
            ms, mib = measure(torch, step, params, support, query, args)
            cells[name] = (f"{ms:.1f}", f"{mib:.0f}")
    (k_ms, k_mib), (m_ms, m_mib) = cells["kgen"], cells["math"]
    numeric = all(c[0].replace(".", "").isdigit() for c in cells.values())
    speedup = f"{float(m_ms) / float(k_ms):.1f}×" if numeric else ""
    ratio = f"{float(m_mib) / max(float(k_mib), 1.0):.1f}×" if numeric else ""
    worst = max((c.rel_l2 for _, c in checks), default=0.0)
    verdict = "FAIL" if failed else (f"ok ({label}, rel_l2 <= {worst:.1e})" if checks else "not checked (OOM)")
    return f"| {n} | {k_ms} | {m_ms} | {speedup} | {k_mib} | {m_mib} | {ratio} | {verdict} |"


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("second_order.py needs PyTorch")
    if not torch.cuda.is_available():
        sys.exit("second_order.py needs a CUDA GPU")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kgen
    import kgen.torch
    from kgen.testing import compare

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    attentions = make_attentions(torch, kgen)
    steps = {name: Step(torch, fn, args, dtype) for name, fn in attentions.items()}
    reference_step = Step(torch, attentions["math"], args, torch.float32)
    print(f"device: {torch.cuda.get_device_name()} | torch {torch.__version__} | kgen {kgen.__version__} | "
          f"b=1 h={args.heads} d={args.head_dim} {args.dtype} causal | inner lr {args.inner_lr} | "
          f"median of {args.reps} steps after {args.warmup} warm-up", flush=True)
    lines = ["| n | kgen ms | math ms | speedup | kgen peak MiB | math peak MiB | memory ratio | check |",
             "|---|---|---|---|---|---|---|---|"]
    for n in args.seqlens:
        lines.append(row(torch, compare, steps, reference_step, args, n))
        print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        args.out.write_text(text + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
