#!/usr/bin/env python3
"""kgen vs PyTorch (eager and torch.compile): lrpe_cosine / md_lrpe_cosine in one process.

Prints the reference reports' tables (docs/lrpe.md §4): one table per (op, direction, act[,
grid, l]), one row per n, one column per implementation, median ms. Before any timing, every
implementation's output (forward: o; backward: x.grad) is checked against a float64 reference
on freshly poisoned buffers; a failing one gets FAIL and no time. The device copy rate is
measured in the same run; each kgen cell also gives its share of the bandwidth floor (docs/lrpe.md §5).
Backward columns: "o.backward(do)" is autograd's full backward including its x.grad
accumulation (what the reference tables time); "kgen kernel" is kgen's backward kernel alone.
Beside each speed table, a memory table measured as the reports measure it: in this process,
after one torch.cuda.reset_peak_memory_stats, the mean over --mem-reps calls of
torch.cuda.max_memory_allocated (MiB) with only that case's tensors alive (x, theta; bwd also
o and dO from one forward).

    python3 bench/compare_lrpe.py                                   # lrpe_cosine, the report's sweep
    python3 bench/compare_lrpe.py --op md_lrpe --dims 2,3 --extras 0,10
    python3 bench/compare_lrpe.py --acts none --seqlens 1k,16k --directions fwd --out lrpe.md
"""
from __future__ import annotations

import argparse
import datetime
import gc
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rounds import sizes  # noqa: E402
import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen.testing import check_lrpe, lrpe_reference  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ACT_TITLES = {"none": "act_none", "relu": "act_relu", "sigmoid": "act_sigmoid", "silu": "act_silu",
              "softmax-1": "act_softmax-dim_-1", "softmax-2": "act_softmax-dim_-2"}
L2_BYTES = 50 << 20
MD_SIDES = {1: None, 2: [16, 32, 64, 128], 3: [4, 8, 16, 32]}


def act_args(act):
    """(kgen act, kgen dim, reference act) of a table act name."""
    if act == "softmax-1":
        return "softmax", -1, "softmax"
    if act == "softmax-2":
        return "softmax", -2, "softmax_seq"
    return act, None, act


# --- the PyTorch formulation that eager and torch.compile run ------------------------------------

def torch_lrpe(x, theta, act, offset=0, shape=None, l=0):
    """In x's dtype with fp32 angles, as a user would write it (xopes' torch reference style)."""
    n, d = x.shape[-2], x.shape[-1]
    if act == "relu":
        x = torch.relu(x)
    elif act == "sigmoid":
        x = torch.sigmoid(x)
    elif act == "silu":
        x = torch.nn.functional.silu(x)
    elif act == "softmax":
        x = torch.softmax(x, dim=-1)
    elif act == "softmax_seq":
        x = torch.softmax(x, dim=-2)
    if shape is None:
        angles = (torch.arange(n, device=x.device, dtype=torch.float32) + offset)[:, None] * theta[:, None, :]
    else:
        e = theta.shape[-1]
        r = torch.arange(n - l, device=x.device)
        coords = []
        for size in reversed(shape):
            coords.append(r % size)
            r = r // size
        coords = torch.stack(coords[::-1], -1).float()
        k = torch.arange(d, device=x.device)
        angles = torch.cat([coords.new_zeros(l, d), coords[:, k // e]])[None] * theta[:, None, k % e]
    return torch.cat([x * torch.cos(angles), x * torch.sin(angles)], dim=-1).to(x.dtype)


# --- timing --------------------------------------------------------------------------------------

# ~1 ms of GPU sleep queued before each timed call: the GPU reaches the start event only after the
# call is queued behind it, so that the events time the GPU work, not the host's launch path (at
# n = 4k a call's GPU time, ~0.1 ms, is close to Python's cost of issuing it).
SLEEP_CYCLES = 2_000_000


def time_ms(fn, sets, reps, warmup, warm_s=0.2, before=None):
    """Median of per-call CUDA-event times, rotating through `sets` (together beyond the L2), after
    `warmup` calls and at least `warm_s` seconds of them (the clocks of a GPU that sat idle while the
    previous case was set up and checked ramp up first). `before(set)` runs untimed before each call;
    each call is queued behind SLEEP_CYCLES of GPU sleep."""
    start, i = time.perf_counter(), 0
    while i < warmup or time.perf_counter() - start < warm_s:
        if before:
            before(sets[i % len(sets)])
        fn(sets[i % len(sets)])
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before:
            before(sets[i % len(sets)])
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        fn(sets[i % len(sets)])
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times)


def host_us(fn, arg, calls=50):
    """Mean host time to issue one call (the GPU may still be running them)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(arg)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def copy_rate(mib=1024, reps=20):
    """Bytes read + written per second of a device-to-device copy."""
    src = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda _: dst.copy_(src), [None], reps, 3)
    return 2 * src.numel() / (ms * 1e-3)


def poison_allocator(nbytes):
    """Fill memory the caching allocator will hand out next with NaN, so that an output an
    implementation allocates and then fails to write reads as NaN in its check."""
    torch.empty(nbytes // 4 + 1, dtype=torch.float32, device="cuda").fill_(math.nan)


def floor_bytes(elements, esize, direction, act, cache=False, batch=1):
    seq = act == "softmax_seq"
    per = (4 if seq else 3) * esize if direction == "fwd" else (7 if seq else 3 if act == "none" else 4) * esize
    if cache:
        per += 4 / batch if direction == "fwd" else (8 if seq else 4)
    return elements * per


# --- one cell row ----------------------------------------------------------------------------------

class Case:
    def __init__(self, args, dtype, act, n, shape=None, l=0):
        self.dtype, self.n, self.shape, self.l = dtype, n, shape, l
        self.b, self.h, self.d = args.batch, args.heads, args.dim
        self.kact, self.kdim, self.ract = act_args(act)
        self.offset = 0
        width = self.d if shape is None else -(-self.d // len(shape))
        base = 10000.0 ** (-torch.arange(width, dtype=torch.float64) / width)
        self.theta = base.float().cuda()[None].expand(self.h, width).contiguous()

    def kgen_fwd(self, x, cache=False):
        if self.shape is None:
            return kgen.torch.lrpe_cosine(x, self.theta, act=self.kact, dim=self.kdim)
        return kgen.torch.md_lrpe_cosine(x, self.theta, self.shape, l=self.l, act=self.kact, dim=self.kdim, cache=cache)

    def kgen_bwd_kernel(self, x, d_o):
        if self.shape is None:
            return kgen.torch.lrpe_cosine_backward(x, self.theta, d_o, act=self.kact, dim=self.kdim)
        return kgen.torch.md_lrpe_cosine_backward(x, self.theta, d_o, self.shape, l=self.l, act=self.kact, dim=self.kdim)

    def torch_fwd(self, x):
        return torch_lrpe(x, self.theta, self.ract, shape=self.shape, l=self.l)

    def reference(self, x):
        return lrpe_reference(x, self.theta, act=self.ract, shape=self.shape, l=self.l)


def impls(case, compiled):
    """name → (forward fn, kind) for every column; kind says how the backward is timed."""
    out = {"kgen": case.kgen_fwd}
    if case.shape is not None:
        out["kgen cache"] = lambda x: case.kgen_fwd(x, cache=True)
    out["torch"] = case.torch_fwd
    if compiled is not None:
        out["torch.compile"] = compiled
    return out


def run_row(case, direction, args, compiled, log):
    """{column: ms, 'FAIL …' or '–'} for one n."""
    numel = case.b * case.h * case.n * case.d
    set_bytes = numel * case.dtype.itemsize * (3 if direction == "fwd" else 7)
    n_sets = max(1, min(8, math.ceil(2 * L2_BYTES / set_bytes)))
    g = torch.Generator(device="cuda").manual_seed(case.n)
    xs = [torch.randn(case.b, case.h, case.n, case.d, generator=g, device="cuda").to(case.dtype) for _ in range(n_sets)]
    d_os = [torch.randn(case.b, case.h, case.n, 2 * case.d, generator=g, device="cuda").to(case.dtype)
            for _ in range(n_sets if direction == "bwd" else 0)]
    x64 = xs[0].double().requires_grad_(direction == "bwd")
    o_ref = case.reference(x64)
    if direction == "bwd":
        o_ref.backward(d_os[0].double())
    cells = {}
    for name, fwd in impls(case, compiled).items():
        try:
            x = xs[0].detach().requires_grad_(direction == "bwd")
            poison_allocator(2 * set_bytes)
            o = fwd(x)
            if direction == "fwd":
                check = check_lrpe(o.detach(), o_ref.detach(), case.dtype, "o")
            else:
                o.backward(d_os[0])
                check = check_lrpe(x.grad, x64.grad, case.dtype, "dx")
            if not check.ok:
                cells[name] = "FAIL"
                log(f"    {name}: {check}")
                continue
            if direction == "fwd":
                with torch.no_grad():
                    cells[name] = time_ms(fwd, xs, args.reps, args.warmup)
                    if name == "kgen":
                        log(f"    kgen host time per call: {host_us(fwd, xs[0]):.1f} us")
            else:
                leaves = [x.detach().requires_grad_(True) for x in xs]
                pairs = [(leaf, fwd(leaf), d_o) for leaf, d_o in zip(leaves, d_os)]

                def backward(p):
                    p[1].backward(p[2], retain_graph=True)

                def zero_grad(p):  # as a training step's zero_grad(set_to_none=True): no accumulation
                    p[0].grad = None
                cells[name + " o.backward(do)"] = time_ms(backward, pairs, args.reps, args.warmup, before=zero_grad)
                if name == "kgen":
                    poison_allocator(2 * set_bytes)
                    dx = case.kgen_bwd_kernel(xs[0], d_os[0])
                    kcheck = check_lrpe(dx, x64.grad, case.dtype, "dx kernel")
                    if not kcheck.ok:
                        cells["kgen kernel"] = "FAIL"
                        log(f"    kgen kernel: {kcheck}")
                    else:
                        cells["kgen kernel"] = time_ms(lambda p: case.kgen_bwd_kernel(p[0], p[1]),
                                                       list(zip(xs, d_os)), args.reps, args.warmup)
            log(f"    {name}: {check}")
        except Exception as e:  # an implementation that cannot run this case: "–" and the reason
            cells[name] = "–"
            log(f"    {name}: – {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return cells


def peak_mib(fn, reps):
    """The reports' memory figure: after one reset of the peak statistics, the mean over `reps`
    calls of torch.cuda.max_memory_allocated, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    readings = []
    for _ in range(reps):
        fn()
        torch.cuda.synchronize()
        readings.append(torch.cuda.max_memory_allocated() / 2**20)
    return statistics.mean(readings)


def memory_row(case, direction, args, compiled, log):
    """{column: MiB or '–'} for one n, each implementation on fresh tensors (x requires grad,
    as in the reports); bwd: o and dO of one forward stay alive, as in the reports."""
    cells = {}
    for name, fwd in impls(case, compiled).items():
        gc.collect()
        torch.cuda.empty_cache()
        try:
            x = torch.randn(case.b, case.h, case.n, case.d, device="cuda").to(case.dtype).requires_grad_()
            if direction == "fwd":
                cells[name] = peak_mib(lambda: fwd(x), args.mem_reps)
                continue
            o = fwd(x)
            d_o = torch.randn_like(o)
            cells[name + " o.backward(do)"] = peak_mib(lambda: o.backward(d_o, retain_graph=True), args.mem_reps)
            if name == "kgen":
                del o
                x.grad = None
                gc.collect()
                torch.cuda.empty_cache()
                xk = x.detach()
                cells["kgen kernel"] = peak_mib(lambda: case.kgen_bwd_kernel(xk, d_o), args.mem_reps)
        except Exception as e:  # as in the speed table: "–" and the reason
            cells[name] = "–"
            log(f"    memory {name}: – {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return cells


def table(title, rows, columns, floor_ms=None):
    """floor_ms: per row, for the kgen cells' share of the bandwidth floor (speed tables)."""
    lines = [f"{title}:", f"{'n':>10}" + "".join(f"{c:>26}" for c in columns)]
    for i, (n, cells) in enumerate(rows):
        line = f"{i:<3}{float(n):>7.1f}"
        for c in columns:
            v = cells.get(c, "–")
            if isinstance(v, float):
                pct = f" ({100 * floor_ms[i] / v:3.0f}%)" if floor_ms and c.startswith("kgen") else ""
                v = f"{v:.6f}{pct}"
            line += f"{v:>26}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=("lrpe", "md_lrpe"), default="lrpe")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--acts", default=None, help="comma-separated: " + ",".join(ACT_TITLES))
    p.add_argument("--directions", default="fwd,bwd")
    p.add_argument("--seqlens", type=sizes, default=sizes("256,512,1k,2k,4k,8k,16k,32k"))
    p.add_argument("--dims", type=sizes, default=[1, 2, 3], help="md grid dims")
    p.add_argument("--extras", type=sizes, default=[0, 10], help="md extra tokens l")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--mem-reps", type=int, default=20, help="calls averaged per memory cell (the reports: 20)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory tables")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    acts = (args.acts or ("none,silu,softmax-1,softmax-2" if args.op == "lrpe" else "none")).split(",")
    if unknown := set(acts) - set(ACT_TITLES):
        p.error(f"unknown --acts {sorted(unknown)}")
    dtype = DTYPES[args.dtype]
    rate = copy_rate()
    header = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, kgen {kgen.__version__}",
              f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
              f"command: {shlex.join([sys.executable, *sys.argv])}",
              f"device copy rate: {rate / 1e12:.3f} TB/s (1 GiB device-to-device copy, bytes read + written; this run)",
              "cells: median ms (CUDA events around each call queued behind ~1 ms of GPU sleep: GPU time, not the host's "
              "launch path; inputs rotated beyond L2); kgen cells: (share of the bandwidth floor, "
              "docs/lrpe.md §5, at the copy rate); every implementation checked against float64 first (FAIL: no "
              "time). bwd: 'o.backward(do)' = autograd backward into x.grad (set to None before each call, as "
              "zero_grad does; torch.compile without buffer donation, so that the graph can be retained); "
              "'kgen kernel' = kgen's "
              "backward kernel alone.",
              "memory tables: MiB, the reports' measure (torch.cuda.max_memory_allocated after one "
              "reset_peak_memory_stats, mean over --mem-reps calls, this process, only the case's tensors alive: x "
              "(requires grad) and theta; bwd also o and dO of one forward; 'kgen kernel': x, theta, dO and dx). kgen's "
              "softmax-over-the-sequence statistics scratch comes from PyTorch's allocator (kgen_lrpe_workspace_bytes, "
              "an upper bound for every config) and is counted.", ""]
    print("\n".join(header), flush=True)
    out = list(header)
    for act in acts:
        for direction in args.directions.split(","):
            grids = [(None, 0)]
            if args.op == "md_lrpe":
                grids = [(m, l) for m in args.dims for l in args.extras]
            for m, l in grids:
                sides = args.seqlens if m in (None, 1) else MD_SIDES[m]
                rows, floors, memory_rows = [], [], []
                for side in sides:
                    shape = None if m is None else (side,) * m
                    n = side if m is None else l + side ** m
                    case = Case(args, dtype, act, n, shape, l)
                    # A fresh compile per case: the cases share one lambda's code object, whose
                    # recompiles past dynamo's cache limit would silently run eager.
                    torch._dynamo.reset()
                    torch._functorch.config.donated_buffer = False  # the timing retains the graph
                    fn = None if args.no_compile else torch.compile(
                        lambda x, c=case: torch_lrpe(x, c.theta, c.ract, shape=c.shape, l=c.l))
                    print(f"{args.op} {direction} {act} n={n}" + (f" grid={shape} l={l}" if shape else ""), flush=True)
                    rows.append((side, run_row(case, direction, args, fn, lambda s: print(s, flush=True))))
                    floors.append(floor_bytes(case.b * case.h * n * case.d, dtype.itemsize, direction, case.ract,
                                              batch=case.b) / rate * 1e3)
                    gc.collect()
                    torch.cuda.empty_cache()
                    if not args.no_memory:
                        memory_rows.append((side, memory_row(case, direction, args, fn, lambda s: print(s, flush=True))))
                columns = []
                for _, cells in rows:
                    columns += [c for c in cells if c not in columns]
                if args.op == "lrpe":
                    title = (f"lrpe_cosine-{{}}-{direction}-batch{args.batch}-head{args.heads}-dim{args.dim}-"
                             f"{ACT_TITLES[act]}-{args.dtype}")
                else:
                    title = (f"md_lrpe_cosine-{{}}-{direction}-batch{args.batch}-head{args.heads}-dim{args.dim}-"
                             f"{args.dtype}-{m}d-l{l}" + ("" if act == "none" else f"-{ACT_TITLES[act]}"))
                text = table(title.format("speed"), rows, columns, floors)
                if memory_rows:
                    text += "\n" + table(title.format("memory"), memory_rows, columns)
                print(text, flush=True)
                out.append(text)
    if args.out:
        args.out.write_text("\n".join(out))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
