"""The FP8 (E4M3) attention forward beside kgen's bf16 forward and SDPA's cuDNN backend (bf16), on an
sm_90a GPU, in interleaved rounds in one process.

Every implementation's output is checked first against a float64 reference on the dequantised
inputs (on one head: rel_l2 and cosine), and its error is printed beside the time: FP8 rounds P to
E4M3 before the product with V, so its error is larger than bf16's. TFLOPS count 4·n_q·n_k·d per
head (halved for causal, docs/attention.md §6). cuDNN's FP8 attention is not reachable from
PyTorch's SDPA, so the FP8 rows are compared with the bf16 ones and with the target of 1000 TFLOPS.

  python3 bench/compare_fp8.py --seqlens 4k,8k,16k --head-dims 128,256 --causal both
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_variants import time_round  # noqa: E402
from rounds import interleaved, size, write_table  # noqa: E402

import kgen.torch  # noqa: E402

FP8 = torch.float8_e4m3fn


def reference_head(q, k, v, causal):
    """o of the first (batch, head) in float64 from logical (b, h, n, d) float64 tensors."""
    q, k, v = q[0, 0], k[0, 0], v[0, 0]
    s = (q @ k.T) * q.shape[-1] ** -0.5
    if causal:
        n_q, n_k = s.shape
        hidden = torch.arange(n_k, device=s.device)[None, :] > torch.arange(n_q, device=s.device)[:, None] + (n_k - n_q)
        s = s.masked_fill(hidden, -math.inf)
    return torch.softmax(s, -1) @ v


def errors(o, ref):
    o = o[0, 0].double()
    diff = float(torch.linalg.vector_norm(o - ref)) / float(torch.linalg.vector_norm(ref))
    cos = float((o * ref).sum()) / float(torch.linalg.vector_norm(o) * torch.linalg.vector_norm(ref))
    return diff, cos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", default="4k,8k,16k", help="n_q = n_k, comma-separated")
    ap.add_argument("--head-dims", default="128,256")
    ap.add_argument("--tokens", type=int, default=16384, help="b·n per row (b = tokens / n, at least 1)")
    ap.add_argument("--hidden", type=int, default=2048, help="h·d per row")
    ap.add_argument("--causal", default="both", choices=("yes", "no", "both"))
    ap.add_argument("--configs", default="", help="FP8 configs to time beside the default, comma-separated")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args()
    causal_flags = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]
    clock = os.popen("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader").read().strip()
    lines = [f"# {torch.cuda.get_device_name()}, SM clock {clock} at start, bf16 / E4M3 inputs, "
             f"reps {args.reps} in {args.rounds} rounds",
             "| d | n | b | h | causal | impl | ms | TFLOPS | rel_l2 | cos | vs kgen bf16 | vs cudnn |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for d in (int(x) for x in args.head_dims.split(",")):
        for n in (size(x) for x in args.seqlens.split(",")):
            b, h = max(1, args.tokens // n), max(1, args.hidden // d)
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = [torch.randn(b, h, n, d, generator=gen, device="cuda") for _ in range(3)]
            q8, k8, v8 = (t.to(FP8) for t in x)
            q16, k16, v16 = (t.to(torch.bfloat16) for t in (q8, k8, v8))  # the same values
            q64, k64, v64 = (t[:1, :1].double() for t in (q8, k8, v8))
            for causal in causal_flags:
                ref = reference_head(q64, k64, v64, causal)
                runs = {
                    "kgen-fp8": lambda: kgen.torch.attention_forward(q8, k8, v8, causal=causal),
                    "kgen-bf16": lambda: kgen.torch.attention_forward(q16, k16, v16, causal=causal),
                    "cudnn-bf16": lambda: _cudnn(q16, k16, v16, causal),
                }
                for config in filter(None, args.configs.split(",")):
                    runs[f"kgen-fp8 {config}"] = (lambda c: lambda: kgen.torch.attention_forward(
                        q8, k8, v8, causal=causal, config=c))(config)
                checked = {}
                for name, run in runs.items():
                    try:
                        err, cos = errors(run(), ref)
                    except kgen.KgenError as e:  # a config this head dim cannot take
                        print(f"{name} d={d} n={n}: skipped ({e})")
                        continue
                    if not (err < (5e-2 if "fp8" in name else 2e-2) and cos > 0.999):
                        print(f"{name} d={d} n={n} causal={causal}: FAILED its check (rel_l2 {err:.2e}, cos {cos:.6f})")
                        continue
                    checked[name] = (run, err, cos)
                times = interleaved({k: v[0] for k, v in checked.items()}, time_round, args.reps, args.warmup,
                                    args.rounds)
                flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
                base16 = times.get("kgen-bf16", (math.nan,))[0]
                cudnn = times.get("cudnn-bf16", (math.nan,))[0]
                for name, (ms, _) in times.items():
                    _, err, cos = checked[name]
                    row = (f"| {d} | {n} | {b} | {h} | {'yes' if causal else 'no'} | {name} | {ms:.3f} | "
                           f"{flops / ms / 1e9:.0f} | {err:.2e} | {cos:.6f} | {base16 / ms:.2f} | {cudnn / ms:.2f} |")
                    lines.append(row)
                    print(row, flush=True)
    clock = os.popen("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader").read().strip()
    lines.append(f"# SM clock {clock} at the end")
    print(lines[-1])
    write_table(lines, args.out, show=False)


def _cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


if __name__ == "__main__":
    main()
