#!/usr/bin/env python3
"""kgen vs PyTorch: attention backward and double backward, same tensors, one process.

Every implementation's gradients are checked against an fp32 math-path reference (on sampled
heads for large shapes, docs/attention.md §5) before it is timed; a failing one gets FAIL and no time.
The backward table times a row's implementations in --rounds rounds (default 3) whose order
rotates, so that a power-capped clock (docs/attention.md §6) meets them alike.

  backward         kgen (kernels only, o/lse from kgen's forward) vs SDPA flash, cuDNN, efficient,
                   FlexAttention and FlashAttention-4 (--impls; torch.autograd.grad of their
                   forward's output), bf16,
                   b·n = 16k, h·d = 2048 (docs/attention.md §6; backward FLOPs = 2.5 × forward);
                   --batch and --heads fix b and h_q instead.
  double backward  the second torch.autograd.grad of L2 = Σ⟨g, (dq, dk, dv)⟩ after
                   grad(o, (q, k, v), dO, create_graph=True): kgen.torch.attention against SDPA's
                   math backend in eager mode and under torch.compile; time and peak memory of
                   that call above what was allocated before it.

--heads-kv (or --gqa, query heads per K/V head) gives K and V fewer heads than q in both tables
(grouped-query attention): kgen takes them as they are, SDPA and flex with enable_gqa; the fp32
reference runs one query head at a time against its K/V head and sums the K/V gradients over
each group's query heads.

    python3 bench/compare_attention_backward.py --out bwd.md
    python3 bench/compare_attention_backward.py --only double --seqlens 8192,16384,32768
    python3 bench/compare_attention_backward.py --only backward --head-dims 128 --causal yes \\
        --seqlens 4k,8k,16k --batch 1 --heads 64 --heads-kv 8    # LLaMA-style GQA, h_q/h_kv = 64/8
"""
from __future__ import annotations

import argparse
import datetime
import functools
import gc
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kgen.torch  # noqa: E402
from kgen.testing import attention_math, compare  # noqa: E402
from rounds import interleaved  # noqa: E402
from compare_attention import (add_shape_args, check_kv_heads, gqa_kwargs, heads_text,  # noqa: E402
                               kv_heads, kv_text, positive, refusals, row_heads, row_shape, shape_text)

PEERS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
         "efficient": SDPBackend.EFFICIENT_ATTENTION}
# Every implementation --impls names: kgen first, then its peers.
IMPLS = ("kgen", *PEERS, "flex", "fa4")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
BOUND = 1e-2          # rel_l2 of 16-bit gradients against the fp32 reference (docs/attention.md §5.2)
SECOND_BOUND = 2e-2   # second order, 16-bit inputs
REF_HEADS = 2         # query heads of batch 0 that the fp32 reference recomputes, at least (whole groups)
DOUBLE_MATMULS = 22   # n×n×d matmuls of kgen's double backward (q pass 14, kv pass 8)


def timed_calls(fn, reps, warmup):
    """(ms of each of `reps` CUDA-event-timed calls after `warmup`, 0.0: no host figure), the
    timer bench/rounds.py's interleaved() takes."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times, 0.0


def timed(fn, warmup, reps):
    """Median ms of `reps` CUDA-event-timed calls after `warmup`."""
    return statistics.median(timed_calls(fn, reps, warmup)[0])


def checks_ok(checks):
    return all(c.ok for c in checks)


def fmt_checks(checks):
    return "; ".join(f"{c.name} rel_l2 {c.rel_l2:.1e} cos {c.cos:.6f}" for c in checks)


# ---------------------------------------------------------------- backward

def by_query_head(grads, tensors, on_kv, groups):
    """fp32 reference gradients of batch 0 for K/V heads [0, groups) and their query heads:
    grads(*slices) on one query head and its K/V head at a time (memory of one head), where
    tensors[i] has K/V heads if on_kv[i], else query heads; grads returns one gradient per
    leading tensor, in order. Gradients of K/V-head tensors are summed over each group's query
    heads, as the grouped attention's are. Returns them (1, heads, ...), heads = query or K/V
    heads of the tensor: compare an implementation's x[:1, :ref.shape[1]] against them."""
    h_q = next(t.shape[1] for t, kv in zip(tensors, on_kv) if not kv)
    group = h_q // next(t.shape[1] for t, kv in zip(tensors, on_kv) if kv)
    out = None
    for hq in range(groups * group):
        part = grads(*(t[:1, h:h + 1].float() for t, h in
                       ((t, hq // group if kv else hq) for t, kv in zip(tensors, on_kv))))
        if out is None:
            out = [[] for _ in part]
        for parts, x, kv in zip(out, part, on_kv):
            if kv and hq % group:
                parts[-1] = parts[-1] + x  # the group's K/V head: sum over its query heads
            else:
                parts.append(x)
    return [torch.cat(parts, dim=1) for parts in out]


def backward_reference(q, k, v, d_o, causal):
    """fp32 math-path gradients (dq, dk, dv) of batch 0: query heads [0, REF_HEADS) and the
    rest of their groups."""
    def grads(q, k, v, d_o):
        ins = [t.detach().requires_grad_(True) for t in (q, k, v)]
        return torch.autograd.grad(attention_math(*ins, causal=causal), ins, d_o)
    group = q.shape[1] // k.shape[1]
    groups = min(k.shape[1], -(-REF_HEADS // group))
    return by_query_head(grads, (q, k, v, d_o), (False, True, True, False), groups)


def bench_backward(args, out):
    dt = DTYPES[args.dtype]
    out.append(f"\n## attention_bwd, {args.dtype}, {shape_text(args)} (ms · TFLOPS, FLOPs = 2.5 × forward; "
               "b×h: h_q/h_kv where K and V have fewer heads)\n")
    impls = [*args.impls] + [f"kgen {c}" for c in args.kgen_configs]
    peers = [i for i in args.impls if i != "kgen"]
    out.append("| n | d | causal | b×h | " + " | ".join(impls) + " | "
               + " | ".join(f"kgen vs {i}" for i in peers) + " | kgen vs fastest |")
    out.append("|" + "---|" * (len(impls) + len(peers) + 5))
    notes = []
    flex = fa4 = None
    if "flex" in impls:
        try:
            from torch.nn.attention.flex_attention import flex_attention, create_block_mask
            torch._dynamo.config.recompile_limit = 64  # one compile per shape of the sweep
            flex = torch.compile(flex_attention, dynamic=False)
        except Exception as e:  # noqa: BLE001
            notes.append(f"FlexAttention unavailable: {e}")
    if "fa4" in impls:
        try:
            from flash_attn.cute import flash_attn_func as fa4
        except Exception as e:  # noqa: BLE001 - not installed here (../shared/tools/fa4)
            notes.append(f"FlashAttention-4 unavailable: {type(e).__name__}: {e}")
    for d in args.head_dims:
        for causal in args.causal:
            for n in args.seqlens:
                b, h, h_kv = row_shape(args, n, d)
                gqa = gqa_kwargs(h, h_kv)
                gen = torch.Generator(device="cuda").manual_seed(n + d)
                q, k, v, d_o = (torch.randn(b, heads, n, d, device="cuda", dtype=dt, generator=gen)
                                for heads in (h, h_kv, h_kv, h))
                flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
                ref = backward_reference(q, k, v, d_o, causal)
                cells, runs = {}, {}  # runs: the implementations that passed, timed together below
                for impl in impls:
                    try:
                        if impl.startswith("kgen"):
                            cfg = impl[5:] or None
                            det = cfg == "deterministic"
                            cfg = None if det else cfg
                            o, lse = kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=True)
                            bufs = [torch.full_like(t, math.nan) for t in (q, k, v)]
                            fn = functools.partial(kgen.torch.attention_backward, q, k, v, o, lse, d_o, causal=causal,
                                                   dq=bufs[0], dk=bufs[1], dv=bufs[2], config=cfg, deterministic=det)
                            fn()
                            grads = bufs
                        else:
                            ins = [t.detach().requires_grad_(True) for t in (q, k, v)]
                            g_o = d_o
                            if impl == "fa4":  # layout (b, n, h, d): its own copies, gradients back below
                                if fa4 is None:
                                    raise RuntimeError("FlashAttention-4 unavailable")
                                ins = [t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]
                                g_o = d_o.transpose(1, 2).contiguous()
                                o = fa4(*ins, causal=causal)
                                o = o[0] if isinstance(o, tuple) else o
                            elif impl == "flex":
                                if flex is None:
                                    raise RuntimeError("FlexAttention unavailable")
                                mask = None
                                if causal:
                                    mask = create_block_mask(lambda b_, h_, i, j: j <= i, None, None, n, n)
                                o = flex(*ins, block_mask=mask, **gqa)
                            else:
                                with sdpa_kernel([PEERS[impl]]), refusals():  # SDPA's warnings say why not
                                    o = F.scaled_dot_product_attention(*ins, is_causal=causal, **gqa)
                            fn = functools.partial(torch.autograd.grad, o, ins, g_o, retain_graph=True)
                            grads = fn()
                            if impl == "fa4":
                                grads = [g.transpose(1, 2) for g in grads]
                        torch.cuda.synchronize()
                        checks = [compare(nm, g[:1, :r.shape[1]].double(), r.double(), bound=BOUND)
                                  for nm, g, r in zip(("dq", "dk", "dv"), grads, ref)]
                        if not checks_ok(checks):
                            cells[impl] = "FAIL"
                            notes.append(f"{impl} n={n} d={d} causal={causal}: {fmt_checks(checks)}")
                            continue
                        del grads
                        runs[impl] = fn
                    except Exception as e:  # noqa: BLE001
                        cells[impl] = "–"
                        notes.append(f"{impl} n={n} d={d} causal={causal}: {type(e).__name__}: {str(e)[:320]}")
                ms = {impl: t for impl, (t, _) in interleaved(runs, timed_calls, args.reps, args.warmup,
                                                             args.rounds).items()}
                del runs
                torch.cuda.empty_cache()
                cells = [cells.get(impl) or f"{ms[impl]:.3f} · {flops / ms[impl] / 1e9:.0f}" for impl in impls]
                ratio = lambda p: f"×{ms[p] / ms['kgen']:.2f}" if "kgen" in ms and p in ms else "–"  # noqa: E731
                timed_peers = [i for i in peers if i in ms]
                fastest = min(timed_peers, key=ms.get) if timed_peers else None
                best = f"{ratio(fastest)} ({fastest})" if fastest else "–"
                out.append(f"| {n} | {d} | {'yes' if causal else 'no'} | {b}×{heads_text(h, h_kv)} | " + " | ".join(cells) +
                           " | " + " | ".join(ratio(i) for i in peers) + f" | {best} |")
                print(out[-1], flush=True)
    out.extend(f"- {x}" for x in notes)


# ---------------------------------------------------------------- double backward

def double_backward_run(attn, q, k, v, d_o, g):
    """Inputs requiring grad, the first-order graph, and the second grad as a callable."""
    ins = [t.detach().requires_grad_(True) for t in (q, k, v, d_o)]
    o = attn(*ins[:3])
    first = torch.autograd.grad(o, ins[:3], ins[3], create_graph=True)
    second = lambda: torch.autograd.grad(first, ins, g, retain_graph=True)  # noqa: E731
    return second


def bench_double(args, out):
    out.append(f"\n## attention_double_bwd: second-order grad call, b = 1, {kv_text(args)} (ms · TFLOPS at "
               f"{DOUBLE_MATMULS} n×n×d matmuls of h_q heads; peak MiB above the inputs and first-order graph; "
               "h: h_q/h_kv where K and V have fewer heads)\n")
    out.append("| dtype | h | n | d | causal | kgen | math eager | math compiled | kgen vs eager | kgen peak | eager peak |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for dname in args.double_dtypes:
        dt = DTYPES[dname]
        for h in args.double_heads:
            for n in args.double_seqlens:
                for d in args.head_dims:
                    for causal in args.causal:
                        h_kv = kv_heads(args, h)
                        gen = torch.Generator(device="cuda").manual_seed(n + d + h)
                        # q, k, v, d_o, then the cotangents of dq, dk, dv
                        q, k, v, d_o, *g = (torch.randn(1, heads, n, d, device="cuda", dtype=dt, generator=gen)
                                            for heads in (h, h_kv, h_kv, h, h, h_kv, h_kv))
                        flops = DOUBLE_MATMULS * 2 * h * n * n * d / (2 if causal else 1)

                        def math_attn(q_, k_, v_):
                            with sdpa_kernel([SDPBackend.MATH]):
                                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal,
                                                                      **gqa_kwargs(h, h_kv))

                        impls = {
                            "kgen": lambda q_, k_, v_: kgen.torch.attention(q_, k_, v_, causal=causal),
                            "eager": math_attn,
                        }
                        if h in args.compile_heads:
                            impls["compiled"] = torch.compile(math_attn)
                        ref = None
                        if n <= args.ref_max_n:  # K/V head 0 and its query heads
                            ref = by_query_head(
                                lambda *t: double_backward_run(lambda a, b_, c: attention_math(a, b_, c, causal=causal),
                                                               *t[:4], t[4:])(),
                                (q, k, v, d_o, *g), (False, True, True, False, False, True, True), 1)
                        cells, ms, peak = [], {}, {}
                        for name, attn in impls.items():
                            try:
                                torch.cuda.synchronize()
                                torch.cuda.empty_cache()
                                second = double_backward_run(attn, q, k, v, d_o, g)
                                torch.cuda.synchronize()
                                gc.collect()  # else a collection during the call can free earlier rows' tensors
                                base = torch.cuda.memory_allocated()
                                torch.cuda.reset_peak_memory_stats()
                                grads = second()
                                torch.cuda.synchronize()
                                peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
                                if ref is not None:
                                    checks = [compare(nm, x[:, :r.shape[1]].double(), r.double(), bound=SECOND_BOUND)
                                              for nm, x, r in zip(("q_bar", "k_bar", "v_bar", "do_bar"), grads, ref)]
                                    if not checks_ok(checks):
                                        cells.append("FAIL")
                                        notes.append(f"{name} {dname} h={h} n={n} d={d} causal={causal}: {fmt_checks(checks)}")
                                        continue
                                elif name == "kgen":
                                    raise RuntimeError(f"no reference above n={args.ref_max_n}: not timed")
                                del grads
                                t = timed(second, 1, args.reps)
                                ms[name] = t
                                cells.append(f"{t:.3f} · {flops / t / 1e9:.0f}")
                                del second
                            except torch.OutOfMemoryError:
                                cells.append("OOM")
                            except Exception as e:  # noqa: BLE001
                                cells.append("–")
                                notes.append(f"{name} {dname} h={h} n={n} d={d} causal={causal}: "
                                             f"{type(e).__name__}: {str(e)[:160]}")
                            finally:
                                torch.cuda.empty_cache()
                        if "compiled" not in impls:
                            cells.append("(not run)")
                        ratio = f"×{ms['eager'] / ms['kgen']:.2f}" if "kgen" in ms and "eager" in ms else "–"
                        pk = lambda x: f"{peak[x]:.0f}" if x in peak else "–"  # noqa: E731
                        out.append(f"| {dname} | {heads_text(h, h_kv)} | {n} | {d} | {'yes' if causal else 'no'} | " +
                                   " | ".join(cells) +
                                   f" | {ratio} | {pk('kgen')} | {pk('eager')} |")
                        print(out[-1], flush=True)
    out.extend(f"- {x}" for x in notes)


def main():
    ints = lambda s: [int(x.replace("k", "000")) if not x.endswith("k") else int(x[:-1]) * 1024 for x in s.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["backward", "double"], help="run one of the two tables")
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES), help="backward table dtype")
    p.add_argument("--seqlens", type=ints, default=[2048, 4096, 8192, 16384], help="backward n values")
    p.add_argument("--head-dims", type=ints, default=[64, 128])
    add_shape_args(p, rows="backward-table row")
    p.add_argument("--causal", type=lambda s: {"yes": [True], "no": [False], "both": [False, True]}[s],
                   default=[False, True], help="yes | no | both")
    p.add_argument("--impls", type=lambda s: [x for x in s.split(",") if x], default=["kgen", *PEERS, "flex"],
                   help=f"backward table: kgen and its peers, comma-separated, from {', '.join(IMPLS)} (fa4: "
                        "FlashAttention-4's flash_attn.cute, where ../shared/tools/fa4 installed it)")
    p.add_argument("--kgen-configs", type=lambda s: [x for x in s.split(",") if x], default=[],
                   help="extra kgen columns: backward configs to force, or 'deterministic'")
    p.add_argument("--double-dtypes", type=lambda s: s.split(","), default=["fp16", "bf16"])
    p.add_argument("--double-heads", type=ints, default=[1, 16], help="h_q values of the double-backward table")
    p.add_argument("--double-seqlens", type=ints, default=[8192])
    p.add_argument("--compile-heads", type=ints, default=[1],
                   help="head counts whose rows also run the torch.compile'd math path (compiles are slow)")
    p.add_argument("--ref-max-n", type=int, default=16384, help="largest n checked against the fp32 reference")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=positive, default=3,
                   help="backward table: rounds the reps are split into, the implementations' order rotating")
    p.add_argument("--out", help="also write the tables (markdown) here")
    args = p.parse_args()
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown or "kgen" not in args.impls:
        p.error(f"argument --impls: {','.join(unknown) or 'kgen missing'}: choose kgen and any of "
                f"{', '.join(IMPLS[1:])}")
    if args.only in (None, "backward"):
        check_kv_heads(p, args, row_heads(args))
    if args.only in (None, "double"):
        check_kv_heads(p, args, [(h, "--double-heads") for h in args.double_heads])
    if not torch.cuda.is_available():
        sys.exit("compare_attention_backward.py needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    out = [f"# kgen backward benchmarks — {props.name}, {datetime.date.today()}, PyTorch {torch.__version__}, "
           f"cuDNN {torch.backends.cudnn.version()}, kgen {kgen.__version__}",
           "Command: `" + " ".join(["python3", *sys.argv]) + "`"]
    print("\n".join(out), flush=True)
    if args.only in (None, "backward"):
        bench_backward(args, out)
    if args.only in (None, "double"):
        bench_double(args, out)
    if args.out:
        Path(args.out).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
