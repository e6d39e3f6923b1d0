#!/usr/bin/env python3
"""kgen.torch's host path without a GPU: the Python and ctypes work per call, the library's own
work left out.

A stand-in libkgen (every function of include/kgen/c_api.h returning OK at once, compiled here
with the system C compiler) takes the library's place, CPU tensors take the device's, and the
fast path's test lets them through. What is timed is then the Python side of each call: argument
tests, call forms, output allocations (on the CPU allocator), the ctypes call, and around autograd
PyTorch's Function and engine bookkeeping. The time is CPU time of the calling thread
(time.thread_time: on a busy machine, time spent preempted does not count), per call, the median
of --reps batches of --calls calls. For scale, SDPA's rows run PyTorch's CPU kernels at shapes
tiny enough that their arithmetic is negligible (their host path is C++ dispatch, as on the GPU).

    python3 bench/host_path_cpu.py
    python3 bench/host_path_cpu.py --python-dir /tmp/old/python    # another checkout's package

Not a replacement for bench/host_cost.py on the GPU: there the library's host work (validation,
config choice, launches) and the CUDA allocator's cost come on top, and the autograd engine runs
the backward on its device thread.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stand_in_library(directory: Path) -> Path:
    """libkgen's C API with every function returning 0 (OK), kgen_last_error/kgen_version a string."""
    names = sorted(set(re.findall(r"\b(kgen_[a-z0-9_]+)\s*\(", (ROOT / "include/kgen/c_api.h").read_text())))
    lines = []
    for name in names:
        if name in ("kgen_last_error", "kgen_version"):
            lines.append(f'const char* {name}(void) {{ return "stand-in"; }}')
        else:
            lines.append(f"int {name}(void) {{ return 0; }}")
    source, library = directory / "stand_in.c", directory / "libkgen_stand_in.so"
    source.write_text("\n".join(lines) + "\n")
    compiler = os.environ.get("CC", "cc")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python-dir", type=Path, default=ROOT / "python", help="where the kgen package is")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--reps", type=int, default=11)
    args = p.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="kgen-host-path-"))
    os.environ["KGEN_LIBRARY"] = str(stand_in_library(directory))
    sys.path.insert(0, str(args.python_dir))
    import torch
    import kgen.torch as kt
    from kgen import _kernels

    torch.set_num_threads(1)
    # CPU tensors through the eager paths (the fast path's test, where this checkout has one)
    kt._eager = lambda t: not kt._is_compiling() and type(t) is torch.Tensor and not kt._dispatch_modes()
    if hasattr(kt, "_direct"):
        kt._direct = lambda q, k, v: (type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
                                      and not kt._dispatch_modes() and not torch.is_autocast_enabled("cuda"))

    def per_call(fn):
        for _ in range(min(args.calls, 100)):
            fn()
        samples = []
        for _ in range(args.reps):
            start = time.thread_time()
            for _ in range(args.calls):
                fn()
            samples.append((time.thread_time() - start) / args.calls * 1e6)
        return statistics.median(samples)

    bf16, sdpa = torch.bfloat16, torch.nn.functional.scaled_dot_product_attention
    q1 = torch.randn(1, 8, 1, 128, dtype=bf16)
    k1, v1 = torch.randn(1, 8, 512, 128, dtype=bf16), torch.randn(1, 8, 512, 128, dtype=bf16)
    out1 = torch.empty_like(q1)
    shape = (4, 16, 25, 64)  # the training row's layout and heads at a short n (CPU allocations stay small)
    q, k, v = (torch.randn(shape, dtype=bf16).requires_grad_(True) for _ in range(3))
    d_o = torch.randn(shape, dtype=bf16)
    kept = kt.attention(q, k, v, causal=True, layout="bnhd")
    second_shape = (2, 2, 128, 64)
    q2, k2, v2, do2, *cotangents = (torch.randn(second_shape, dtype=bf16) for _ in range(7))
    ins = [t.detach().requires_grad_(True) for t in (q2, k2, v2, do2)]
    first = torch.autograd.grad(kt.attention(*ins[:3]), ins[:3], ins[3], create_graph=True)
    tiny = (1, 2, 1, 8)  # SDPA's CPU kernels at a negligible size
    qt, kt_, vt = (torch.randn(tiny).requires_grad_(True) for _ in range(3))
    dt = torch.randn(tiny)
    qd, kd, vd = torch.randn(1, 8, 1, 128), torch.randn(1, 8, 4, 128), torch.randn(1, 8, 4, 128)

    packed = (64, 16, 64)  # a packed batch of three sequences, 64 tokens
    qp, kp, vp = (torch.randn(packed, dtype=bf16).requires_grad_(True) for _ in range(3))
    dop = torch.randn(packed, dtype=bf16)
    cu = torch.tensor([0, 10, 40, 64], dtype=torch.int32)

    def varlen_fwd_bwd():
        o = kt.varlen_attention(qp, kp, vp, cu, cu, 30, 30, causal=True)
        return torch.autograd.grad(o, (qp, kp, vp), dop)

    def varlen_kernels_alone():
        o, lse = _kernels.varlen_attention_forward(qp.detach(), kp.detach(), vp.detach(), cu, cu, 30, 30, None, True)
        return _kernels.varlen_attention_backward(qp.detach(), kp.detach(), vp.detach(), o, lse, dop, cu, cu, 30, 30,
                                                  None, True)

    def fwd_bwd():
        o = kt.attention(q, k, v, causal=True, layout="bnhd")
        return torch.autograd.grad(o, (q, k, v), d_o)

    def kernels_alone():
        o, lse = _kernels.attention_forward(q.detach(), k.detach(), v.detach(), None, True, "bnhd", True)
        return _kernels.attention_backward(q.detach(), k.detach(), v.detach(), o, lse, d_o, None, True, "bnhd")

    def kgen_tiny():
        o = kt.attention(qt, kt_, vt, causal=True, layout="bnhd")
        return torch.autograd.grad(o, (qt, kt_, vt), dt)

    def sdpa_tiny():
        o = sdpa(qt.transpose(1, 2), kt_.transpose(1, 2), vt.transpose(1, 2), is_causal=True).transpose(1, 2)
        return torch.autograd.grad(o, (qt, kt_, vt), dt)

    rows = [
        ("decode forward b=1 h=8 n_k=512 d=128", "kgen.torch.attention_forward", lambda: kt.attention_forward(q1, k1, v1)),
        ("", "kgen.torch.attention_forward(out=)", lambda: kt.attention_forward(q1, k1, v1, out=out1)),
        ("", "kgen.torch.attention_forward(return_lse=True)",
         lambda: kt.attention_forward(q1, k1, v1, return_lse=True)),
        ("", "kgen.torch.attention (no grad recorded)", lambda: kt.attention(q1, k1, v1)),
        ("decode forward, 4 keys, fp32", "SDPA on the CPU (reference)", lambda: sdpa(qd, kd, vd)),
        ("", "kgen.torch.attention_forward", lambda: kt.attention_forward(qd, kd, vd)),
        ("fwd+bwd b=4 n=16 h=25 d=64 causal bnhd", "kgen.torch.attention through autograd", fwd_bwd),
        ("", "kgen kernels without autograd", kernels_alone),
        ("", "forward, graph recorded", lambda: kt.attention(q, k, v, causal=True, layout="bnhd")),
        ("", "backward alone (retained graph)",
         lambda: torch.autograd.grad(kept, (q, k, v), d_o, retain_graph=True)),
        ("fwd+bwd b=1 n=1 h=2 d=8 causal bnhd fp32", "SDPA on the CPU through autograd (reference)", sdpa_tiny),
        ("", "kgen.torch.attention through autograd", kgen_tiny),
        ("varlen fwd+bwd 3 sequences, 64 tokens, h=16 d=64 causal", "kgen.torch.varlen_attention through autograd",
         varlen_fwd_bwd),
        ("", "kgen kernels without autograd", varlen_kernels_alone),
        ("", "forward (no grad recorded)", lambda: kt.varlen_attention(qp.detach(), kp.detach(), vp.detach(), cu, cu,
                                                                         30, 30, causal=True)),
        ("double backward b=2 h=2 n=128 d=64", "second grad (create_graph first)",
         lambda: torch.autograd.grad(first, ins, cotangents, retain_graph=True)),
    ]
    print(f"torch {torch.__version__}, kgen from {args.python_dir}; CPU time per call (µs), median of {args.reps} "
          f"batches of {args.calls}; the library a stand-in that returns at once\n")
    print("| shape | call | µs/call |\n|---|---|---|")
    for text, name, fn in rows:
        print(f"| {text} | {name} | {per_call(fn):.1f} |", flush=True)


if __name__ == "__main__":
    main()
