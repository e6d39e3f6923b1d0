#!/usr/bin/env python3
"""kgen vs PyTorch SDPA (flash, cuDNN, efficient), FlexAttention and FlashAttention-4: forward attention, same tensors.

Every implementation's output is checked against a reference (docs/attention.md §5) before
anything is timed; one that fails gets FAIL and no time, one that raises gets "–" and a footnote.
A row's implementations are timed in --rounds rounds (default 3) whose order rotates, so that a
power-capped clock (docs/attention.md §6) meets them alike.
Standard sweep (docs/attention.md §6): b·n = 16k tokens, h·d = 2048, n = 512…16k, d = 64/128, causal and not.
--batch and --heads fix b and h_q instead; --heads-kv (or --gqa, query heads per K/V head) gives
K and V fewer heads than q (grouped-query attention): kgen takes them as they are, SDPA and flex
with enable_gqa, and the reference repeats each K/V head over its query heads.
FlexAttention ("flex") is flex_attention under torch.compile(dynamic=False); causal is a block mask
(kv_idx <= q_idx + n_k - n_q) built once per configuration; its first call (compile) is not timed.
FlashAttention-4 ("fa4", flash_attn.cute, where ../shared/tools/fa4 installed it; not among the
defaults) takes (b, n, h, d) copies of each input set, made once outside the timed calls.
--q-len gives every row n_q query rows against its n keys (decode-like shapes, n_q <= 16 say):
those rows run without a mask (SDPA's is_causal aligns its mask top-left when n_q != n_k, kgen's
and flex's bottom-right, so a causal row would compare different operations) and their cells
give GB/s (q, k, v and o bytes once) instead of TFLOPS.

    python3 bench/compare_attention.py                          # the whole sweep, bf16
    python3 bench/compare_attention.py --seqlens 2k,8k --head-dims 128 --causal no --out r.md
    python3 bench/compare_attention.py --head-dims 128 --causal yes --seqlens 4k,8k,16k \\
        --batch 1 --heads 64 --heads-kv 8                     # LLaMA-style GQA, h_q/h_kv = 64/8
    python3 bench/compare_attention.py --q-len 1 --seqlens 1k,4k,16k --causal no --head-dims 128 \
        --batch 64 --heads 32 --heads-kv 8                    # decode: one query row per sequence
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen.testing import TOLERANCE, REL_L2_BOUND, attention_reference, check_attention, compare  # noqa: E402
from rounds import interleaved, sizes  # noqa: E402

PEERS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
         "efficient": SDPBackend.EFFICIENT_ATTENTION}
IMPLS = ("kgen", *PEERS, "flex", "fa4")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
L2_BYTES = 50 << 20  # H100/H200 L2
FULL_REFERENCE_FLOPS = 1.5e11  # above: sampled heads vs the math reference + flash on all heads
SAMPLED_HEADS = 4
MAX_SETS = 256  # input sets rotated through; at least 3, together over twice the L2
SPIN_CYCLES_PER_S = 2.5e9  # over-estimate of the SM clock, so the spin always covers enqueueing
FLEX_RECOMPILE_LIMIT = 256  # torch.compile(dynamic=False) compiles flex once per configuration


@dataclass
class Config:
    n: int
    d: int
    causal: bool
    b: int
    h: int  # query heads
    h_kv: int  # K/V heads, dividing h
    n_q: int = 0  # query rows; 0: n

    @property
    def q_rows(self):
        return self.n_q or self.n

    @property
    def flops(self):  # docs/attention.md §6: 4·b·h_q·n_q·n_k·d, causal halves it
        return 4 * self.b * self.h * self.q_rows * self.n * self.d / (2 if self.causal else 1)

    def bytes(self, itemsize):  # q and o, k and v, each once
        return (2 * self.h * self.q_rows + 2 * self.h_kv * self.n) * self.b * self.d * itemsize

    def key(self):
        return {"n": self.n, "n_q": self.q_rows, "d": self.d, "causal": self.causal, "b": self.b,
                "h": self.h, "h_kv": self.h_kv}


@dataclass
class Result:
    impl: str
    checks: list  # kgen.testing.Check
    first_ms: float = math.nan  # first call, wall clock (kgen, flex: includes their compile)
    ms: float | None = None
    host_us: float | None = None  # host time to enqueue one call
    error: str = ""  # why the implementation could not run

    @property
    def ok(self):
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)


# --- shape options (compare_attention_backward.py uses them too) ----------------------------------

def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def add_shape_args(p, rows="row"):
    """--tokens, --hidden, --batch and --heads for `rows`; --heads-kv and --gqa for every row."""
    p.add_argument("--tokens", type=positive, default=16384,
                   help="b·n: b = tokens / n unless --batch")
    p.add_argument("--hidden", type=positive, default=2048,
                   help="h_q·d: h_q = hidden / d unless --heads")
    p.add_argument("--batch", type=positive, help=f"b of every {rows} instead of tokens / n")
    p.add_argument("--heads", type=positive,
                   help=f"query heads h_q of every {rows} instead of hidden / d")
    kv = p.add_mutually_exclusive_group()
    kv.add_argument("--heads-kv", type=positive, metavar="H_KV",
                    help="K and V heads (grouped-query attention: each serves h_q / h_kv "
                         "query heads; SDPA and flex get enable_gqa=True); must divide every "
                         "row's h_q; default h_kv = h_q")
    kv.add_argument("--gqa", type=positive, metavar="G",
                    help="instead of --heads-kv: query heads per K/V head, h_kv = h_q / G; "
                         "must divide every row's h_q")


def check_kv_heads(p, args, heads):
    """p.error naming --heads-kv or --gqa unless it divides every h_q of `heads`, a list of
    (h_q, where it comes from)."""
    option, value = ("--heads-kv", args.heads_kv) if args.heads_kv else ("--gqa", args.gqa)
    for h, source in heads:
        if value and h % value:
            p.error(f"argument {option}: {value} must divide h_q, but h_q = {h} ({source})")


def row_heads(args):
    """[(h_q, where it comes from)] of the rows, one per head dim."""
    if args.heads:
        return [(args.heads, "--heads")]
    return [(max(1, args.hidden // d), f"--hidden {args.hidden} / d = {d}") for d in args.head_dims]


def kv_heads(args, h):
    return args.heads_kv or h // (args.gqa or 1)


def row_shape(args, n, d):
    """(b, h_q, h_kv) of the row with sequence length n and head dim d."""
    h = args.heads or max(1, args.hidden // d)
    return args.batch or max(1, args.tokens // n), h, kv_heads(args, h)


def kv_text(args):
    if args.heads_kv:
        return f"h_kv = {args.heads_kv}"
    return f"h_kv = h_q / {args.gqa}" if args.gqa and args.gqa > 1 else "h_kv = h_q"


def shape_text(args):
    b = args.batch or f"{args.tokens} / n"
    h = args.heads or f"{args.hidden} / d"
    return f"b = {b}, h_q = {h}, {kv_text(args)}"


def heads_text(h, h_kv):
    """h_q, or h_q/h_kv where K and V have fewer heads."""
    return f"{h}/{h_kv}" if h_kv != h else f"{h}"


def gqa_kwargs(h, h_kv):
    """SDPA's and flex's argument for fewer K/V heads; none otherwise, as before PyTorch 2.5."""
    return {"enable_gqa": True} if h_kv != h else {}


@contextlib.contextmanager
def refusals():
    """An exception inside comes out as a RuntimeError that also carries the warnings issued
    before it: SDPA says in warnings why a backend refuses."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except Exception as e:
            why = [str(w.message).splitlines()[0] for w in caught] + [str(e).splitlines()[0]]
            raise RuntimeError(f"{type(e).__name__}: " + " / ".join(why)[:300]) from e


# --- implementations: callables (q, k, v) -> (o, lse or None) on logical (b, h, n, d) views ---

_flex = None  # (compiled flex_attention, create_block_mask), imported on first use


def load_flex():
    """FlexAttention, imported lazily: a torch without it (or without its compiler) gets "–"."""
    global _flex
    if _flex is None:
        try:
            import torch._dynamo
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            config = torch._dynamo.config
            limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, limit, max(getattr(config, limit), FLEX_RECOMPILE_LIMIT))
            _flex = torch.compile(flex_attention, dynamic=False), create_block_mask
        except Exception as e:
            why = (str(e).splitlines() or [""])[0]
            raise RuntimeError(f"FlexAttention unavailable: {type(e).__name__}: {why}"[:300]) from e
    return _flex


def make_runner(impl, cfg, q):
    gqa = gqa_kwargs(cfg.h, cfg.h_kv)
    if impl == "kgen":  # K and V with h_kv heads as they are
        out = torch.empty_like(q)  # same strides as q
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)

        def run(q, k, v):
            return kgen.torch.attention_forward(q, k, v, causal=cfg.causal, out=out, lse=lse,
                                                return_lse=True)

        def poison():
            out.fill_(math.nan)
            lse.fill_(math.nan)
        return run, poison
    if impl == "flex":
        flex, create_block_mask = load_flex()
        mask = None
        if cfg.causal:  # bottom-right aligned, as kgen's (causal rows have n_q == n_k)
            n_q, n_k = cfg.q_rows, cfg.n
            mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + (n_k - n_q),
                                     None, None, n_q, n_k, device=q.device)

        def run(q, k, v):
            return flex(q, k, v, block_mask=mask, **gqa), None
        return run, lambda: None  # flex allocates its output: nothing to poison
    if impl == "fa4":
        return fa4_runner(cfg)
    backend = PEERS[impl]

    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal, **gqa), None
    return run, lambda: None  # SDPA allocates its output: nothing to poison


def fa4_runner(cfg):
    """FlashAttention-4 (flash_attn.cute, where ../shared/tools/fa4 installed it): layout (b, n,
    h, d), so each input set gets a (b, n, h, d) copy once, outside the timed calls; o comes back
    as a (b, h, n, d) view."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:
        raise RuntimeError(f"FlashAttention-4 unavailable: {type(e).__name__}: {e}"[:300]) from e
    copies = {}

    def bnhd(t):
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()))
        if key not in copies:
            copies[key] = t.transpose(1, 2).contiguous()
        return copies[key]

    def run(q, k, v):
        o = flash_attn_func(bnhd(q), bnhd(k), bnhd(v), causal=cfg.causal)
        o = o[0] if isinstance(o, tuple) else o
        return o.transpose(1, 2), None
    return run, lambda: None  # FA4 allocates its output: nothing to poison


def first_call(impl, cfg, inputs):
    """Poisoned first call; returns (runner, o, lse, wall ms) or raises with the reason."""
    run, poison = make_runner(impl, cfg, inputs[0])
    poison()
    torch.cuda.synchronize()
    with refusals():  # unsupported here: keep SDPA's warnings, they say why
        t0 = time.perf_counter()
        o, lse = run(*inputs)
        torch.cuda.synchronize()
    return run, o, lse, (time.perf_counter() - t0) * 1e3


# --- checks ------------------------------------------------------------------------------------

def references(cfg, q, k, v, dtype):
    """[(label, index, o_ref, lse_ref)]: all heads in fp64 for small shapes, else a few sampled
    (batch, query head) slices in fp32 (fp64 for fp32 inputs), chunked by query rows; K and V
    have h_kv heads, query head i reads K/V head i // (h_q / h_kv) (attention_reference repeats
    them over the query heads)."""
    if cfg.flops <= FULL_REFERENCE_FLOPS:
        return [("", (slice(None), slice(None)), *attention_reference(q, k, v, causal=cfg.causal))]
    ref_dtype = torch.float64 if dtype == torch.float32 else torch.float32
    g = torch.Generator().manual_seed(cfg.n * cfg.d)
    picks = {(0, 0), (cfg.b - 1, cfg.h - 1)}
    while len(picks) < min(SAMPLED_HEADS, cfg.b * cfg.h):
        picks.add((int(torch.randint(cfg.b, (1,), generator=g)),
                   int(torch.randint(cfg.h, (1,), generator=g))))
    refs = []
    group = cfg.h // cfg.h_kv
    for bi, hi in sorted(picks):
        idx = (slice(bi, bi + 1), slice(hi, hi + 1))
        kv = (slice(bi, bi + 1), slice(hi // group, hi // group + 1))
        o, lse = attention_reference(q[idx], k[kv], v[kv], causal=cfg.causal, dtype=ref_dtype)
        refs.append((f"[{bi},{hi}]", idx, o, lse))
    return refs


def run_checks(o, lse, refs, flash_o, dtype):
    checks = []
    for label, idx, o_ref, lse_ref in refs:
        for c in check_attention(o[idx], None if lse is None else lse[idx], o_ref, lse_ref, dtype):
            c.name += label
            checks.append(c)
    if flash_o is not None and len(refs) > 0 and refs[0][0]:  # sampled: all heads vs flash too
        atol, rtol = TOLERANCE[dtype]
        checks.append(compare("o vs flash", o, flash_o, bound=REL_L2_BOUND[dtype],
                              atol=atol, rtol=rtol))
    return checks


# --- timing ------------------------------------------------------------------------------------

def time_gpu(run, sets, reps, warmup):
    """GPU ms of each of `reps` calls rotating through `sets`, measured by CUDA events while a
    spin kernel holds the GPU until every call is queued (host overhead not counted; it is
    returned separately as host µs per call)."""
    for i in range(warmup):
        run(*sets[i % len(sets)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(reps):
        run(*sets[i % len(sets)])
    host_s = (time.perf_counter() - t0) / reps
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(1.0, 2 * host_s * reps + 2e-3) * SPIN_CYCLES_PER_S))
    for i, (start, end) in enumerate(events):
        start.record()
        run(*sets[i % len(sets)])
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events], host_s * 1e6


# --- one configuration ---------------------------------------------------------------------------

def bench_config(cfg, args, dtype, log):
    def tensor(h, rows, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        shape = (cfg.b, rows, h, cfg.d) if args.layout == "bnhd" else (cfg.b, h, rows, cfg.d)
        t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)
        return t.transpose(1, 2) if args.layout == "bnhd" else t

    set_bytes = (cfg.h * cfg.q_rows + 2 * cfg.h_kv * cfg.n) * cfg.b * cfg.d * dtype.itemsize
    n_sets = min(MAX_SETS, max(3, math.ceil(2 * L2_BYTES / set_bytes)))
    shapes = ((cfg.h, cfg.q_rows), (cfg.h_kv, cfg.n), (cfg.h_kv, cfg.n))  # q, k, v
    sets = [tuple(tensor(h, rows, 3 * s + i + args.seed) for i, (h, rows) in enumerate(shapes))
            for s in range(n_sets)]
    refs = references(cfg, *sets[0], dtype)
    log(f"  reference: {refs[0][2].dtype} math, " + (
        f"heads {' '.join(r[0] for r in refs)} (+ SDPA flash on all heads, if it passes)"
        if refs[0][0] else "all heads"))

    results, outputs = {}, {}
    for impl in args.impls:
        try:
            run, o, lse, ms = first_call(impl, cfg, sets[0])
            results[impl] = Result(impl, [], first_ms=ms)
            outputs[impl] = (run, o, lse)
        except Exception as e:
            results[impl] = Result(impl, [], error=str(e))
    # flash first: once it passes its own check, it is the all-heads reference of the others
    flash_o = None
    for impl in sorted(outputs, key=lambda i: i != "flash"):
        run, o, lse = outputs[impl]
        results[impl].checks = run_checks(o, lse, refs, flash_o if impl != "flash" else None, dtype)
        if impl == "flash" and results[impl].ok:
            flash_o = o
    for impl in args.impls:
        r = results[impl]
        if r.error:
            log(f"  {impl:9s} –  {r.error}")
            continue
        log(f"  {impl:9s} {summary(r.checks)}  first call {r.first_ms:.1f} ms")
        for c in r.checks:
            if not c.ok:
                log(f"      {c}")
    runs = {impl: outputs[impl][0] for impl in args.impls if results[impl].ok}
    timings = interleaved(runs, lambda run, reps, warmup: time_gpu(run, sets, reps, warmup), args.reps,
                          args.warmup, args.rounds)
    for impl, (ms, host_us) in timings.items():
        results[impl].ms, results[impl].host_us = ms, host_us
    return results


def summary(checks):
    """Worst figures over a result's checks."""
    ok = all(c.ok for c in checks)
    return (f"{'ok  ' if ok else 'FAIL'} rel_l2 {max(c.rel_l2 for c in checks):.2e} "
            f"cos {min(c.cos for c in checks):.6f} max_abs {max(c.max_abs for c in checks):.2e}")


# --- report --------------------------------------------------------------------------------------

def sm_clock():
    found = []
    try:
        found.append(f"{torch.cuda.clock_rate()} MHz (torch.cuda.clock_rate)")
    except Exception:
        pass
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        query = ["--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits"]
        for select in ([f"--id=GPU-{uuid}"], []):  # without a usable uuid: the first GPU
            done = subprocess.run(["nvidia-smi", *select, *query], capture_output=True,
                                  text=True, timeout=20)
            if done.returncode == 0 and done.stdout.strip():
                now, top = (x.strip() for x in done.stdout.splitlines()[0].split(","))
                found.append(f"{now} MHz now, {top} MHz max (nvidia-smi)")
                break
    except Exception:
        pass
    return "; ".join(found) or "unknown"


def metadata(args):
    return {
        "device": torch.cuda.get_device_name(),
        "sm_clock": sm_clock(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "kgen": kgen.__version__,
        "kgen_library": kgen.library_path(),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "dtype": args.dtype, "layout": args.layout, "shape": shape_text(args),
        "reps": args.reps, "warmup": args.warmup, "rounds": args.rounds,
    }


def cell(r, cfg, notes, itemsize):
    if r.error:
        return "– " + notes.ref(r.error)
    if not r.ok:
        return "FAIL " + notes.ref("; ".join(str(c) for c in r.checks if not c.ok))
    if cfg.n_q:  # decode-like rows: bandwidth
        return f"{r.ms:.4f} ms · {cfg.bytes(itemsize) / r.ms / 1e6:.0f} GB/s"
    return f"{r.ms:.3f} ms · {cfg.flops / r.ms / 1e9:.0f}"


def n_text(cfg):
    return f"{cfg.n} (n_q {cfg.n_q})" if cfg.n_q else f"{cfg.n}"


class Notes:
    """Numbered footnotes, one per distinct text."""
    def __init__(self):
        self.texts = []

    def ref(self, text):
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def markdown(meta, rows, impls, itemsize):
    notes = Notes()
    lines = [f"### Forward attention, {meta['dtype']}, layout {meta['layout']}: kgen vs "
             f"{', '.join(i for i in impls if i != 'kgen')} (same tensors, one process)", ""]
    lines += [f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in meta.items()]
    lines += ["- b×h: batch × query heads, h_q/h_kv where K and V have fewer heads (grouped-query "
              "attention)",
              "- cells: median GPU time of one call (CUDA events, inputs rotated; the reps in rounds, "
              "the implementations' order rotating from round to round) · TFLOPS "
              "(4·b·h_q·n²·d / t, causal halved), or with n_q (decode-like rows) · GB/s (q, k, v "
              "and o bytes once / t); FAIL = output check failed, so no time",
              "- the first call per configuration (kgen: JIT compile; flex: torch.compile) is "
              "excluded from timing; its wall time is in the checks table", ""]
    peers = [p for p in ("flash", "cudnn", "flex", "fa4") if p in impls and "kgen" in impls]
    head = ["n", "d", "causal", "b×h", *impls, *(f"kgen speed-up vs {p}" for p in peers)]
    if len(peers) > 1:
        head.append("vs the fastest")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cfg, res in rows:
        cells = [cell(res[i], cfg, notes, itemsize) for i in impls]
        ratios = [f"×{res[p].ms / res['kgen'].ms:.2f}" if res[p].ms and res["kgen"].ms else "–"
                  for p in peers]
        timed = [p for p in peers if res[p].ms and res["kgen"].ms]
        if len(peers) > 1:
            best = min(timed, key=lambda p: res[p].ms) if timed else None
            ratios.append(f"×{res[best].ms / res['kgen'].ms:.2f} ({best})" if best else "–")
        lines.append(f"| {n_text(cfg)} | {cfg.d} | {'yes' if cfg.causal else 'no'} | "
                     f"{cfg.b}×{heads_text(cfg.h, cfg.h_kv)} | " +
                     " | ".join(cells + ratios) + " |")
    lines += ["", "| n | d | causal | impl | check (worst over outputs) | first call ms | host µs/call |",
              "|---|---|---|---|---|---|---|"]
    for cfg, res in rows:
        for i in impls:
            r = res[i]
            text = ("– " + notes.ref(r.error)) if r.error else summary(r.checks)
            host = f"{r.host_us:.0f}" if r.host_us else ""
            first = "" if r.error else f"{r.first_ms:.1f}"
            lines.append(f"| {n_text(cfg)} | {cfg.d} | {'yes' if cfg.causal else 'no'} | {i} | "
                         f"{text} | {first} | {host} |")
    lines += [""] + [f"[{k + 1}] {t}" for k, t in enumerate(notes.texts)]
    return "\n".join(lines) + "\n"


def r_itemsize(meta):
    return DTYPES[meta["dtype"]].itemsize


def json_lines(meta, rows):
    yield json.dumps({"meta": meta})
    for cfg, res in rows:
        for r in res.values():
            yield json.dumps({**cfg.key(), "impl": r.impl, "ok": r.ok, "ms": r.ms,
                              "tflops": cfg.flops / r.ms / 1e9 if r.ms else None,
                              "gbps": cfg.bytes(r_itemsize(meta)) / r.ms / 1e6 if r.ms else None,
                              "first_call_ms": r.first_ms, "host_us": r.host_us,
                              "error": r.error or None,
                              "checks": [c.as_dict() for c in r.checks]})


# --- main ----------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--seqlens", type=sizes, default=sizes("512,1k,2k,4k,8k,16k"))
    p.add_argument("--head-dims", type=sizes, default=[64, 128])
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    add_shape_args(p)
    p.add_argument("--layout", choices=kgen.torch.LAYOUTS, default="bhnd")
    p.add_argument("--impls", type=lambda s: s.split(","), default=[i for i in IMPLS if i != "fa4"],
                   help=f"comma-separated subset of {','.join(IMPLS)}")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=positive, default=3,
                   help="rounds the reps are split into, the implementations' order rotating (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--q-len", type=positive, metavar="N_Q",
                   help="query rows of every row against its n keys (decode-like shapes); "
                        "needs --causal no (SDPA aligns a causal mask top-left when n_q != n_k)")
    p.add_argument("--out", type=Path, help="write the markdown here, JSON lines beside (.jsonl)")
    args = p.parse_args()
    if unknown := set(args.impls) - set(IMPLS):
        p.error(f"unknown --impls {sorted(unknown)}")
    check_kv_heads(p, args, row_heads(args))
    if args.q_len and args.causal != "no":
        p.error("--q-len needs --causal no: SDPA's is_causal aligns the mask top-left when "
                "n_q != n_k, kgen's and flex's bottom-right")
    dtype = DTYPES[args.dtype]

    meta = metadata(args)
    for k, v in meta.items():
        print(f"{k}: {v}")
    print("kgen's (and flex's) first call per configuration compiles its kernel: excluded from timing")
    rows = []
    for d in args.head_dims:
        for causal in {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]:
            for n in args.seqlens:
                cfg = Config(n, d, causal, *row_shape(args, n, d), n_q=args.q_len or 0)
                print(f"n={n} n_q={cfg.q_rows} d={d} causal={causal} b={cfg.b} h={cfg.h} "
                      f"h_kv={cfg.h_kv}", flush=True)
                rows.append((cfg, bench_config(cfg, args, dtype, lambda s: print(s, flush=True))))
                torch.cuda.empty_cache()
    meta["sm_clock_after"] = sm_clock()
    text = markdown(meta, rows, args.impls, dtype.itemsize)
    print("\n" + text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".jsonl").write_text("\n".join(json_lines(meta, rows)) + "\n")
        print(f"wrote {args.out} and {args.out.with_suffix('.jsonl')}")


if __name__ == "__main__":
    main()
