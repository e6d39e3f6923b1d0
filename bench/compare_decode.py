#!/usr/bin/env python3
"""Decode steps on paged and contiguous K/V caches: kgen against SDPA and the HBM floor.

A row is one decode step: b sequences of one query token each against a cache of `kv` keys per
sequence, h_q = 32 query heads of d = 128 (GQA: h_kv = 8; MHA: 32), bf16 (docs/attention.md §10).
Implementations: "paged16" and "paged64" (kgen.torch.paged_attention on pages of 16 and 64 rows,
handed out in a shuffled order), "contig" (kgen's dense forward on the same keys laid out
contiguously), "sdpa" (PyTorch's fastest backend on the contiguous cache, enable_gqa) and, with
--fa4, "fa4p16" and "fa4p64" (FlashAttention-4's flash_attn_varlen_func on the same paged caches,
its defaults: no split-KV on sm_90; `from flash_attn.cute import ...`). Every
output is checked against an fp32 reference on two sequences before it is timed. The floor is the
bytes of K and V read divided by the copy rate (bytes read and written per second by a 1 GiB
device-to-device copy) measured in the same run; "floor %" is kgen paged16's share of it. GPU times are medians in µs
per step of CUDA graphs of --reps steps (so no host gap enters a step), over interleaved rounds
(bench/rounds.py); "host µs" is the eager call's host time per step, without a graph.

    python3 bench/compare_decode.py                      # b 1/16/64, kv 4k/32k, GQA 8 and MHA
    python3 bench/compare_decode.py --batches 1 --kv 128k --out r.md
    python3 bench/compare_decode.py --fa4                # with FlashAttention-4 on the paged caches
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kgen.torch  # noqa: E402
from rounds import interleaved, size, write_table  # noqa: E402

IMPLS = ("paged16", "paged64", "contig", "sdpa")


def paged_cache(k, v, page, seed):
    """(k_cache, v_cache, block_table) of contiguous (b, n, h, d) caches in shuffled pages."""
    b, n, h, d = k.shape
    per = n // page
    order = torch.randperm(b * per, generator=torch.Generator().manual_seed(seed)).to(k.device)
    k_cache = torch.empty(b * per, page, h, d, device=k.device, dtype=k.dtype)
    v_cache = torch.empty_like(k_cache)
    k_cache[order] = k.reshape(b * per, page, h, d)
    v_cache[order] = v.reshape(b * per, page, h, d)
    return k_cache, v_cache, order.reshape(b, per).to(torch.int32)


_GRAPHS: dict = {}


def graph_round(run, reps, warmup):
    """([ms per step], host µs per eager call) of `run` replayed as one CUDA graph of `reps` steps."""
    import time  # noqa: PLC0415

    key = (id(run), reps)
    if key not in _GRAPHS:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for _ in range(reps):
                    run()
        except Exception as e:  # noqa: BLE001 - not capturable: eager steps (host gaps may enter)
            print(f"graph capture failed ({type(e).__name__}: {str(e)[:120]}); timing eager steps", file=sys.stderr)
            graph = None
        _GRAPHS[key] = graph
    graph = _GRAPHS[key]
    if graph is None:
        from compare_variants import time_round  # noqa: PLC0415
        return time_round(run, reps, warmup)
    for _ in range(max(1, warmup // reps)):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        run()
    host = (time.perf_counter() - t0) / 10 * 1e6
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / reps], host


def measure_copy_rate() -> float:
    """Bytes moved per second (read plus written) by a 1 GiB device-to-device copy: the median of
    20 eager copies timed with CUDA events (the issue's "copy rate", 4.25 TB/s on an H200)."""
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(25):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times = sorted(times[5:])
    return 2 * src.numel() * src.element_size() / (times[len(times) // 2] * 1e-3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--max-gb", type=float, default=40.0, help="skip rows whose caches exceed this many GB")
    ap.add_argument("--kv", default="4k,32k", help="keys per sequence, comma-separated")
    ap.add_argument("--heads-kv", default="8,32", help="h_kv values (h_q = 32)")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--fa4", action="store_true", help="also time FlashAttention-4 on the paged caches")
    args = ap.parse_args()
    h_q, d = 32, 128
    impls = IMPLS + (("fa4p16", "fa4p64") if args.fa4 else ())
    fa4_varlen = None
    if args.fa4:
        from flash_attn.cute import flash_attn_varlen_func as fa4_varlen  # noqa: PLC0415
    ratios = " | fa4p16/paged16 | fa4p64/paged64" if args.fa4 else ""
    lines = ["| b | kv | h_kv | MB read | floor µs | " + " | ".join(f"{i} µs" for i in impls) +
             " | paged16 floor % | paged64 floor % | paged16/contig | sdpa/paged16" + ratios +
             " | host µs paged16 / sdpa |",
             "|" + "---|" * (5 + len(impls) + 5 + (2 if args.fa4 else 0))]
    copy_rate = measure_copy_rate()
    print(f"copy rate {copy_rate / 1e12:.2f} TB/s (bytes read and written per second, 1 GiB copy)")
    for b in map(int, args.batches.split(",")):
        for n in map(size, args.kv.split(",")):
            for h_kv in map(int, args.heads_kv.split(",")):
                if 2 * b * n * h_kv * d * 2 * 3 > args.max_gb * 1e9:  # contiguous caches and two paged copies
                    continue
                k = torch.randn(b, n, h_kv, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
                q = torch.randn(b, 1, h_q, d, device="cuda", dtype=torch.bfloat16)
                caches = {page: paged_cache(k, v, page, page) for page in (16, 64)}
                kt, vt, qt = (t.transpose(1, 2) for t in (k, v, q))
                runs = {
                    "paged16": lambda: kgen.torch.paged_attention(q, *caches[16]),
                    "paged64": lambda: kgen.torch.paged_attention(q, *caches[64]),
                    "contig": lambda: kgen.torch.attention_forward(q, k, v, layout="bnhd"),
                    "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=h_kv != h_q).transpose(1, 2),
                }
                if fa4_varlen is not None:
                    used = torch.full((b,), n, device="cuda", dtype=torch.int32)
                    for page in (16, 64):
                        kc, vc, table = caches[page]
                        runs[f"fa4p{page}"] = (lambda kc=kc, vc=vc, table=table: fa4_varlen(
                            q, kc, vc, page_table=table, seqused_k=used)[0])
                ref = F.scaled_dot_product_attention(qt[:2].float(), kt[:2].float(), vt[:2].float(),
                                                     enable_gqa=h_kv != h_q).transpose(1, 2)
                ok = {}
                for name, run in runs.items():
                    err = float((run()[:2].float() - ref).norm() / ref.norm())
                    ok[name] = err < 2e-2
                    if not ok[name]:
                        print(f"{name}: rel_l2 {err:.2e} FAIL", file=sys.stderr)
                nbytes = 2 * k.numel() * k.element_size()
                timed = {name: run for name, run in runs.items() if ok[name]}
                t = interleaved(timed, graph_round, args.reps, args.warmup, args.rounds)
                _GRAPHS.clear()
                floor_us = nbytes / copy_rate * 1e6
                us = {name: t[name][0] * 1e3 for name in t}
                cell = " | ".join(f"{us[i]:.1f}" if i in us else "FAIL" for i in impls)
                p16, p64 = us.get("paged16", float("nan")), us.get("paged64", float("nan"))
                host = {name: t[name][1] for name in t}
                lines.append(f"| {b} | {n} | {h_kv} | {nbytes / 1e6:.1f} | {floor_us:.1f} | {cell} | "
                             f"{100 * floor_us / p16:.0f} | {100 * floor_us / p64:.0f} | "
                             f"{p16 / us.get('contig', float('nan')):.2f} | {us.get('sdpa', float('nan')) / p16:.2f} | "
                             + (f"{us.get('fa4p16', float('nan')) / p16:.2f} | {us.get('fa4p64', float('nan')) / p64:.2f} | "
                                if args.fa4 else "") +
                             f"{host.get('paged16', float('nan')):.0f} / {host.get('sdpa', float('nan')):.0f} |")
                print(lines[-1], flush=True)
                del k, v, caches
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
