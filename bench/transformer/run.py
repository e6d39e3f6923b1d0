#!/usr/bin/env python3
"""End-to-end transformer benchmark: a CS336-style GPT language model (batch 4, vocabulary 10,000)
trained with each attention implementation in turn (kgen, SDPA cuDNN, SDPA flash, naive
PyTorch), same weights and tokens; plus the attention-only table. Every implementation's output
and gradients are checked against a float64/float32 math reference on the benchmark's shapes
before anything is timed; a failing one gets status FAIL and no time.

    PYTHONPATH=$PWD/python KGEN_LIBRARY=$PWD/dist/lib/libkgen.so python3 -m bench.transformer --out OUT
        default: models S, M, L, XL, 2.7B at context 512 and 2048, bf16 autocast, eager,
        forward + backward, kgen / sdpa-cudnn / sdpa-flash / naive, 1 warm-up + 10 timed steps,
        and the attention-only table (one head, batch 8)
    python3 -m bench.transformer --quick --out OUT        S and XL, kgen vs sdpa-cudnn, 5 steps
    python3 -m bench.transformer --variants report --models S,M --contexts 256
        the reference report's variants: fp32, no warm-up, bf16, compile, bf16+compile, AdamW
    python3 -m bench.transformer --device cpu --tiny --out OUT   CPU smoke run (no GPU needed)

A variant is dtype[+compile][+nowarmup][+adamw]: fp32 or bf16/fp16 autocast, eager or
torch.compile, 1 warm-up step (--warmup) or none, forward + backward or + an AdamW step (lr = 0:
every kernel of the update runs, and the weights stay the same for the next implementation).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for _p in (str(REPO / "python"), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402

from bench.transformer import attention as attn  # noqa: E402
from bench.transformer.measure import free, is_oom, measure, stats  # noqa: E402
from bench.transformer.model import BATCH, GPT, MODELS, VOCAB, loss_fn, parameter_count  # noqa: E402
from bench.transformer.report import markdown_table, plot_lines, write_json  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
VARIANT_PRESETS = {"report": "fp32,fp32+nowarmup,bf16,fp32+compile,bf16+compile,fp32+adamw,bf16+adamw"}

# What each preset sets; explicit options override it.
PRESETS = {
    "default": dict(models="S,M,L,XL,2.7B", contexts="512,2048", impls="kgen,sdpa-cudnn,sdpa-flash,naive",
                    variants="bf16", steps=10, batch=BATCH, attn_contexts="256,1024,4096,16384",
                    attn_dims="16,32,64,128", attn_batch=8),
    "quick": dict(models="S,XL", contexts="512,2048", impls="kgen,sdpa-cudnn", variants="bf16", steps=5,
                  batch=BATCH, attn_contexts="1024,4096", attn_dims="64,128", attn_batch=8),
    "tiny": dict(models="tiny", contexts="32,64", impls="kgen,sdpa-math,naive",
                 variants="fp32,bf16,fp32+nowarmup,fp32+adamw", steps=2, batch=2, attn_contexts="64,128",
                 attn_dims="16,32", attn_batch=2),
}

TIME_COLUMNS = ["fwd avg (sec)", "fwd std (sec)", "back avg (sec)", "back std (sec)",
                "fws & back avg (sec)", "fws & back std (sec)"]
OPT_COLUMNS = ["optimizer avg (sec)", "optimizer std (sec)"]
MEM_COLUMNS = ["model mem", "model+fwd mem", "model+fwd+back mem", "fwd mem", "back mem"]
TAIL_COLUMNS = ["status", "attention", "dtype", "device", "batch_size", "compile", "warmup"]


@dataclass(frozen=True)
class Variant:
    dtype: str = "bf16"
    compile: bool = False
    warmup: int = 1
    adamw: bool = False

    @classmethod
    def parse(cls, spec: str, warmup: int) -> "Variant":
        parts = spec.strip().lower().split("+")
        if parts[0] not in DTYPES:
            raise ValueError(f"variant {spec!r}: starts with one of {', '.join(DTYPES)}")
        flags = set(parts[1:])
        if unknown := flags - {"compile", "nowarmup", "adamw"}:
            raise ValueError(f"variant {spec!r}: unknown {sorted(unknown)} (compile, nowarmup, adamw)")
        return cls(parts[0], "compile" in flags, 0 if "nowarmup" in flags else warmup, "adamw" in flags)

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    @property
    def key(self) -> str:
        return "+".join([self.dtype] + ["compile"] * self.compile + [f"warmup{self.warmup}"] + ["adamw"] * self.adamw)

    @property
    def setting(self) -> str:
        precision = "fp32" if self.dtype == "fp32" else f"mixed precision ({self.dtype} autocast)"
        warm = "no warm-up" if self.warmup == 0 else f"{self.warmup} warm-up step{'s' * (self.warmup > 1)}"
        return f"{precision}, {'torch.compile' if self.compile else 'eager'}, {warm}"

    @property
    def label(self) -> str:
        return self.setting + (", forward + backward + AdamW step" if self.adamw else ", forward + backward")


def ints(text: str) -> list[int]:
    return [int(x[:-1]) * 1024 if x.lower().endswith("k") else int(x) for x in text.split(",") if x]


def names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# --- metadata -------------------------------------------------------------------------------------

def sm_clock() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown (nvidia-smi: {type(e).__name__})"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return "unknown (nvidia-smi failed)"
    now, top = (x.strip() for x in (lines[0].split(",") + ["?"])[:2])
    return f"{now} now, {top} max (nvidia-smi, GPU 0)"


def kgen_info() -> str:
    try:
        import kgen
        path = kgen.library_path()
        return f"{kgen.__version__}, {path}" if path else "library not found (set KGEN_LIBRARY)"
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return f"unavailable ({type(e).__name__}: {e})"


def command_line() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith("__main__.py"):
        argv[:1] = ["-m", "bench.transformer"]
    return shlex.join(["python3", *argv])


def metadata(args) -> dict:
    cuda = args.device == "cuda"
    return {
        "device": torch.cuda.get_device_name() if cuda else (platform.processor() or platform.machine()),
        "sm_clock": sm_clock() if cuda else "n/a",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "kgen": kgen_info() if cuda else "not used on this device",
        "KGEN_LIBRARY": os.environ.get("KGEN_LIBRARY", ""),
        "python": sys.version.split()[0],
        "command": command_line(),
        "timer": {"sync": "torch.cuda.synchronize() + time.perf_counter() at every phase boundary",
                  "events": "CUDA events at the phase boundaries, one synchronize per step"}[args.timer],
        "steps": args.steps,
        "batch_size": args.batch,
    }


# --- the checks -------------------------------------------------------------------------------------

class Checks:
    """One check per (implementation, shape, dtype), run before that implementation's first timing
    on the shape and reused by every later variant."""

    def __init__(self, device, log):
        self.device, self.log, self.done = device, log, {}

    def get(self, impl, b, n, h, d, dtype):
        key = (impl, b, n, h, d, dtype)
        if key not in self.done:
            self.done[key] = self._run(impl, b, n, h, d, dtype)
            free(self.device)
        return self.done[key]

    def _run(self, impl, b, n, h, d, dtype):
        entry = {"attention": impl, "shape (b, n, h, d)": f"{b}×{n}×{h}×{d}",
                 "dtype": str(dtype).removeprefix("torch."), "status": "ok", "check": "",
                 "first call (sec)": float("nan"), "reference": ""}
        try:
            attend = attn.make(impl, self.device)
        except (RuntimeError, ImportError, OSError) as e:
            entry.update(status="skipped", check=str(e))
        else:
            with warnings.catch_warnings(record=True) as caught:  # SDPA says why it refuses in warnings
                warnings.simplefilter("always")
                try:
                    result = attn.check(attend, b, n, h, d, dtype, self.device)
                    entry.update(status="ok" if result.ok else "FAIL", check=result.summary,
                                 reference=result.reference, raw=result.as_dict())
                    entry["first call (sec)"] = result.first_call_s
                except Exception as e:  # noqa: BLE001 - recorded as the row's status
                    why = [str(w.message).splitlines()[0] for w in caught if str(w.message)]
                    why.append(f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
                    entry.update(status="OOM" if is_oom(e) else "error", check=" / ".join(why)[-400:])
        self.log(f"  check {impl:10s} {entry['shape (b, n, h, d)']:>18s} {entry['dtype']:8s} "
                 f"{entry['status']:7s} {entry['check']}")
        return entry


# --- rows ---------------------------------------------------------------------------------------------

def attention_variants(variants):
    """The variants the attention-only table runs: AdamW does not apply to it."""
    return list(dict.fromkeys(dataclasses.replace(v, adamw=False) for v in variants))


def run_checks(args, checks, log):
    """Every (implementation, shape, dtype) of the run, checked before anything is timed."""
    shapes = []
    for v in args.variant_list if not args.no_e2e else []:
        shapes += [(args.batch, n, MODELS[m].heads, MODELS[m].head_dim, v.torch_dtype)
                   for m in args.models for n in args.contexts]
    for v in attention_variants(args.variant_list) if not args.no_attention else []:
        shapes += [(args.attn_batch, n, 1, d, v.torch_dtype) for d in args.attn_dims for n in args.attn_contexts]
    log(f"checks: {len(args.impls)} implementations × {len(dict.fromkeys(shapes))} shapes")
    for shape in dict.fromkeys(shapes):
        for impl in args.impls:
            checks.get(impl, *shape)
        attn.drop_reference()
    free(args.device)


def over_budget(args) -> bool:
    return args.budget is not None and time.perf_counter() > args.started + args.budget


def budget_row(args):
    return nan_row("not run", f"the time budget (--budget {args.budget:g} s) was spent before this configuration")


def nan_row(status, note=""):
    row = {c: float("nan") for c in TIME_COLUMNS + OPT_COLUMNS + MEM_COLUMNS}
    row.update(status=status, note=note)
    return row


def summarize(result, adamw):
    """Report columns from measure()'s per-step phase times and first-step memory."""
    times, host = result["times"], result["host"]
    row = {}
    for name, i in (("fwd", 0), ("back", 1)):
        row[f"{name} avg (sec)"], row[f"{name} std (sec)"] = stats(t[i] for t in times)
        row[f"{name} host avg (sec)"] = stats(h[i] for h in host)[0]
        wall = row[f"{name} avg (sec)"]
        row[f"{name} host share"] = row[f"{name} host avg (sec)"] / wall if wall > 0 else float("nan")
    row["fws & back avg (sec)"], row["fws & back std (sec)"] = stats(t[0] + t[1] for t in times)
    if adamw:
        row["optimizer avg (sec)"], row["optimizer std (sec)"] = stats(t[2] for t in times)
    mem = result["memory"]
    row.update({c: float("nan") for c in MEM_COLUMNS})  # no allocator statistics off CUDA
    if mem:
        row.update({"model mem": mem[0], "model+fwd mem": mem[1], "model+fwd+back mem": mem[2],
                    "fwd mem": mem[1] - mem[0], "back mem": mem[2] - mem[1]})
        if adamw:
            row["model+fwd+back+opt mem"] = mem[3]
    row["times"], row["host_times"] = times, host
    return row


def run_e2e(args, variants, checks, log, on_progress):
    rows = []
    device = args.device
    for name in args.models:
        size = MODELS[name]
        free(device)
        torch.manual_seed(0)
        model = None
        try:
            if not over_budget(args):
                with torch.device(device):
                    model = GPT(size, max(args.contexts))
        except Exception as e:  # noqa: BLE001
            if not is_oom(e):
                raise
        free(device)
        if model is not None:
            log(f"model {name}: d_model {size.d_model}, d_ff {size.d_ff}, {size.layers} layers, {size.heads} heads "
                f"of {size.head_dim}, {parameter_count(model) / 1e6:.0f}M parameters")
        for v in variants:
            for n in args.contexts:
                base = {"model": name, "context_length": n, "dtype": str(v.torch_dtype).removeprefix("torch."),
                        "device": device, "batch_size": args.batch, "compile": v.compile, "warmup": v.warmup,
                        "variant": v.key}
                for impl in args.impls:
                    if over_budget(args):
                        row = budget_row(args)
                    elif model is None:
                        row = nan_row("OOM", "the model's parameters do not fit")
                    else:
                        row = run_model(model, size, n, impl, v, args, checks, log)
                    rows.append({**base, **row, "attention": impl})
                    free(device)
        del model
        free(device)
        on_progress(rows)
    return rows


def run_model(model, size, n, impl, v, args, checks, log):
    device = args.device
    chk = checks.get(impl, args.batch, n, size.heads, size.head_dim, v.torch_dtype)
    if chk["status"] != "ok":
        return nan_row(chk["status"], chk["check"])
    g = torch.Generator(device=device).manual_seed(n)
    tokens = torch.randint(VOCAB, (args.batch, n + 1), generator=g, device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    model.attend = attn.make(impl, device, compiled=v.compile)
    fn = model
    if v.compile:
        torch._dynamo.reset()
        fn = torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.0) if v.adamw else None
    losses = []

    def step(clock):
        with attn.autocast(device, v.torch_dtype):
            loss = loss_fn(fn(x), y)
        clock.mark()
        loss.backward()
        clock.mark()
        if opt is not None:
            opt.step()
            clock.mark()
        losses.append(loss.detach())
        model.zero_grad(set_to_none=True)

    row = {}
    try:
        result = measure(step, warmup=v.warmup, steps=args.steps, clock=args.timer, device=device)
        row = {**summarize(result, v.adamw), "status": "ok"}
    except Exception as e:  # noqa: BLE001 - OOM and errors are statuses
        row = nan_row("OOM" if is_oom(e) else "error", f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        model.zero_grad(set_to_none=True)
        model.attend = None
        opt = fn = None
        if v.compile:
            torch._dynamo.reset()
    if losses:
        row["loss"] = float(losses[0])
    log(f"  {size.name:5s} n={n:<6d} {impl:10s} {v.key:22s} {row['status']:6s} "
        + (f"fwd {row['fwd avg (sec)']:.4f}s back {row['back avg (sec)']:.4f}s "
           f"fwd+back {row['fws & back avg (sec)']:.4f}s ± {row['fws & back std (sec)']:.1e}"
           if row["status"] == "ok" else row.get("note", "")))
    return row


def run_attention_only(args, variants, checks, log):
    """CS336's attention benchmark: one head of width d_model, batch args.attn_batch, causal."""
    rows, device, b = [], args.device, args.attn_batch
    for v in attention_variants(variants):
        for d in args.attn_dims:
            for n in args.attn_contexts:
                for impl in args.impls:
                    base = {"context_length": n, "d_model": d, "attention": impl,
                            "dtype": str(v.torch_dtype).removeprefix("torch."), "device": device,
                            "batch_size": b, "compile": v.compile, "warmup": v.warmup, "variant": v.key}
                    chk = checks.get(impl, b, n, 1, d, v.torch_dtype)
                    if over_budget(args):
                        row = budget_row(args)
                    elif chk["status"] != "ok":
                        row = nan_row(chk["status"], chk["check"])
                    else:
                        row = time_attention(impl, b, n, d, v, args)
                    rows.append({**base, **row})
                    free(device)
                    log(f"  attention n={n:<6d} d={d:<4d} {impl:10s} {v.key:22s} {row['status']:6s} "
                        + (f"fwd {row['fwd avg (sec)']:.2e}s back {row['back avg (sec)']:.2e}s"
                           if row["status"] == "ok" else row.get("note", "")))
    return rows


def time_attention(impl, b, n, d, v, args):
    device = args.device
    try:
        q, k, val, d_o = attn.inputs(b, n, 1, d, v.torch_dtype, device, seed=1)
        leaves = [t.detach().contiguous().requires_grad_(True) for t in (q, k, val)]
        del q, k, val
        attend = attn.make(impl, device, compiled=v.compile)
        if v.compile:
            torch._dynamo.reset()
            attend = torch.compile(attend, dynamic=False)

        def step(clock):
            with attn.autocast(device, v.torch_dtype):
                o = attend(*leaves)
            clock.mark()
            o.backward(d_o)
            clock.mark()
            for t in leaves:
                t.grad = None

        return {**summarize(measure(step, warmup=v.warmup, steps=args.steps, clock=args.timer, device=device),
                            False), "status": "ok"}
    except Exception as e:  # noqa: BLE001
        return nan_row("OOM" if is_oom(e) else "error", f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        if v.compile:
            torch._dynamo.reset()


# --- report ---------------------------------------------------------------------------------------------

def speedups(rows, impls, keys=("model", "context_length")):
    """Per configuration (`keys`): each implementation's fws & back time and kgen's speed-up over it."""
    table, order = {}, []
    for r in rows:
        key = tuple(r[k] for k in keys)
        if key not in table:
            table[key] = {k: r[k] for k in keys}
            order.append(key)
        t = r["fws & back avg (sec)"]
        table[key][f"{r['attention']} (sec)"] = t if r["status"] == "ok" else r["status"]
    out = []
    for key in order:
        row = table[key]
        kg = row.get("kgen (sec)")
        for impl in impls:
            if impl == "kgen" or "kgen" not in impls:
                continue
            other = row.get(f"{impl} (sec)")
            ok = isinstance(kg, float) and isinstance(other, float)
            row[f"kgen speed-up vs {impl}"] = round(other / kg, 3) if ok else "–"
        out.append(row)
    cols = list(keys) + [f"{i} (sec)" for i in impls] + [
        f"kgen speed-up vs {i}" for i in impls if i != "kgen" and "kgen" in impls]
    return out, cols


def notes_of(rows):
    """Numbered footnotes for the rows that did not run ("note" column)."""
    texts = []
    for r in rows:
        if r.get("note"):
            if r["note"] not in texts:
                texts.append(r["note"])
            r["why"] = f"[{texts.index(r['note']) + 1}]"
    return [f"[{i + 1}] {t}" for i, t in enumerate(texts)]


def render(meta, variants, checks, e2e, attn_rows, args, plots) -> str:
    lines = ["# kgen end-to-end transformer benchmark", ""]
    lines += [f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in meta.items()]
    lines += ["- models: " + ", ".join(f"{m} ({MODELS[m].d_model}/{MODELS[m].d_ff}/{MODELS[m].layers} layers/"
                                       f"{MODELS[m].heads} heads of {MODELS[m].head_dim})" for m in args.models),
              f"- vocabulary {VOCAB}, pre-norm RMSNorm, causal attention with RoPE, SwiGLU; times in seconds "
              "per step, memory in MiB (peak allocated on the first step)",
              "- every implementation was checked (o, dq, dk, dv against a math reference) on each shape "
              "before it was timed; the check paid its first-call costs (kgen's JIT compile, cuDNN's plan), "
              "so no-warm-up rows do not include them", ""]
    lines += ["## Checks", "", markdown_table(list(checks.done.values()), [
        "attention", "shape (b, n, h, d)", "dtype", "status", "check", "first call (sec)", "reference"]), ""]
    for v in variants:
        rows = [r for r in e2e if r["variant"] == v.key]
        if not rows:
            continue
        rows.sort(key=lambda r: (args.impls.index(r["attention"]), args.models.index(r["model"]),
                                 r["context_length"]))
        notes = notes_of(rows)
        cols = ["model", "context_length"] + TIME_COLUMNS + (OPT_COLUMNS if v.adamw else []) + TAIL_COLUMNS
        lines += [f"## End to end: {v.label}", "", markdown_table(rows, cols + (["why"] if notes else [])), ""]
        lines += notes + ([""] if notes else [])
        table, scols = speedups(sorted(rows, key=lambda r: (args.models.index(r["model"]), r["context_length"])),
                                args.impls)
        lines += ["### Forward + backward per step, side by side", "", markdown_table(table, scols), ""]
        mem_cols = MEM_COLUMNS + (["model+fwd+back+opt mem"] if v.adamw else [])
        lines += ["### Peak memory (MiB)", "",
                  markdown_table(rows, ["model", "context_length", "attention", *mem_cols, "status"]), ""]
        lines += ["### Host time and loss",
                  "", "Host time: from a phase's start until its Python call returns (launches queued, before any "
                  "synchronize); a host share near 1 means the phase is host-bound. Loss: the first step's, same "
                  "weights and tokens for every implementation.", "",
                  markdown_table(rows, ["model", "context_length", "attention", "fwd host avg (sec)", "fwd avg (sec)",
                                        "fwd host share", "back host avg (sec)", "back avg (sec)", "back host share",
                                        "loss", "status"]), ""]
        if v.key in plots:
            lines += [f"![step time vs context length]({plots[v.key]})", ""]
    for v in attention_variants(variants):
        rows = [r for r in attn_rows if r["variant"] == v.key]
        if not rows:
            continue
        rows.sort(key=lambda r: (args.impls.index(r["attention"]), r["d_model"], r["context_length"]))
        notes = notes_of(rows)
        cols = ["context_length", "d_model"] + TIME_COLUMNS + MEM_COLUMNS + [
            "status", "attention", "dtype", "device", "batch_size", "compile", "warmup"]
        lines += [f"## Attention only (one head of width d_model, causal): {v.setting}", "",
                  markdown_table(rows, cols + (["why"] if notes else [])), ""]
        lines += notes + ([""] if notes else [])
        keys = ("context_length", "d_model")
        table, scols = speedups(sorted(rows, key=lambda r: (r["d_model"], r["context_length"])), args.impls, keys)
        lines += ["### Forward + backward, side by side", "", markdown_table(table, scols), ""]
        if "attn:" + v.key in plots:
            lines += [f"![attention time vs context length]({plots['attn:' + v.key]})", ""]
    return "\n".join(lines) + "\n"


def _file_part(key: str) -> str:
    """A variant key as part of a file name: "bf16+compile" -> "bf16_compile" (no '+', which some
    copy and upload tools refuse in names)."""
    return key.replace("+", "_")


def make_plots(out: Path, variants, e2e, attn_rows) -> dict:
    plots = {}
    for v in variants:
        panels = {}
        for r in (r for r in e2e if r["variant"] == v.key):
            panels.setdefault(r["model"], {}).setdefault(r["attention"], []).append(
                (r["context_length"], r["fws & back avg (sec)"]))
        name = f"e2e_{_file_part(v.key)}.png"
        if plot_lines(out / name, f"Forward + backward per step: {v.label}", panels, "context length",
                      "seconds per step"):
            plots[v.key] = name
    for v in attention_variants(variants):
        panels = {}
        for r in (r for r in attn_rows if r["variant"] == v.key):
            panels.setdefault(f"d_model {r['d_model']}", {}).setdefault(r["attention"], []).append(
                (r["context_length"], r["fws & back avg (sec)"]))
        name = f"attention_{_file_part(v.key)}.png"
        if plot_lines(out / name, f"Attention only, forward + backward: {v.setting}", panels,
                      "context length", "seconds"):
            plots["attn:" + v.key] = name
    return plots


# --- main -----------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m bench.transformer", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="S and XL, kgen vs sdpa-cudnn, 5 steps, small attention table")
    preset.add_argument("--tiny", action="store_true", help="a 2-layer model on short contexts: the CPU smoke run")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda if available")
    p.add_argument("--models", help=f"comma-separated, of {','.join(MODELS)}")
    p.add_argument("--contexts", help="context lengths, e.g. 512,2048 (k suffix allowed)")
    p.add_argument("--impls", help=f"attention implementations, of {','.join(attn.IMPLS)}")
    p.add_argument("--variants", help="comma-separated dtype[+compile][+nowarmup][+adamw], or 'report' for "
                                      f"{VARIANT_PRESETS['report']}")
    p.add_argument("--steps", type=int, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps (variants without +nowarmup)")
    p.add_argument("--batch", type=int, help=f"model batch size (default {BATCH})")
    p.add_argument("--timer", choices=("sync", "events"), default="sync")
    p.add_argument("--attn-contexts", help="attention-only context lengths")
    p.add_argument("--attn-dims", help="attention-only d_model values (one head)")
    p.add_argument("--attn-batch", type=int, help="attention-only batch size")
    p.add_argument("--no-e2e", action="store_true", help="skip the model table")
    p.add_argument("--no-attention", action="store_true", help="skip the attention-only table")
    p.add_argument("--budget", type=float, help="seconds: configurations not started by then are reported "
                                                "'not run' (the report is written either way)")
    p.add_argument("--out", type=Path, default=Path("transformer-bench"),
                   help="folder for report.md, results.json and the plots (default ./transformer-bench)")
    args = p.parse_args(argv)
    preset = PRESETS["quick" if args.quick else "tiny" if args.tiny else "default"]
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device here: use --device cpu --tiny for the smoke run")
    args.models, args.impls = names(args.models), names(args.impls)
    args.contexts, args.attn_contexts, args.attn_dims = ints(args.contexts), ints(args.attn_contexts), ints(args.attn_dims)
    if unknown := set(args.models) - set(MODELS):
        p.error(f"unknown models {sorted(unknown)}")
    if unknown := set(args.impls) - set(attn.IMPLS):
        p.error(f"unknown attention implementations {sorted(unknown)}")
    try:
        specs = VARIANT_PRESETS.get(args.variants, args.variants)
        args.variant_list = [Variant.parse(s, args.warmup) for s in names(specs)]
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv=None):
    args = parse_args(argv)

    def log(text):
        print(text, flush=True)

    meta = metadata(args)
    for k, v in meta.items():
        log(f"{k}: {v}")
    if "kgen" in args.impls and args.device != "cuda":
        log("kgen: skipped on this device (kgen runs on CUDA devices only)")
    args.out.mkdir(parents=True, exist_ok=True)
    started = args.started = time.perf_counter()
    checks = Checks(args.device, log)
    e2e, attn_rows = [], []

    def save(final=False):
        meta["elapsed (sec)"] = round(time.perf_counter() - started, 1)
        if final and args.device == "cuda":
            meta["sm_clock_after"] = sm_clock()
        plots = make_plots(args.out, args.variant_list, e2e, attn_rows) if final else {}
        text = render(meta, args.variant_list, checks, e2e, attn_rows, args, plots)
        (args.out / "report.md").write_text(text)
        write_json(args.out / "results.json", {"meta": meta, "checks": list(checks.done.values()),
                                               "e2e": e2e, "attention": attn_rows, "complete": final})
        return text

    run_checks(args, checks, log)
    if not args.no_e2e:
        log(f"end to end: {len(args.models)} models × {len(args.contexts)} contexts × {len(args.impls)} "
            f"implementations × {len(args.variant_list)} variants")
        run_e2e(args, args.variant_list, checks, log, lambda rows: (e2e.__setitem__(slice(None), rows), save()))
    if not args.no_attention:
        log("attention only")
        attn_rows[:] = run_attention_only(args, args.variant_list, checks, log)
    text = save(final=True)
    log("\n" + text)
    log(f"wrote {args.out / 'report.md'}, {args.out / 'results.json'} and the plots in {args.out} "
        f"({meta['elapsed (sec)']} s)")


if __name__ == "__main__":
    main()
