#!/usr/bin/env python3
"""Plots of BENCHMARKS.md's current attention tables: kgen against SDPA flash, cuDNN and
FlexAttention, TFLOPS by sequence length, one panel per head dim and mask.

The numbers are read from BENCHMARKS.md itself (the "### Forward (" and "### Backward (" tables
of the current-results section), so a new measurement pasted there is re-plotted with

    python3 bench/plot_benchmarks.py            # writes docs/img/attention_{forward,backward}_h200.png

Only the standard grid is plotted (b·n = 16k tokens, h·d = 2048, n from 1k; no GQA or short-row
rows).
Needs matplotlib; nothing here runs a GPU.
"""
import argparse
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PEERS = ["kgen", "flash", "cudnn", "flex"]  # columns plotted, in this order
LABELS = {"kgen": "kgen", "flash": "SDPA flash", "cudnn": "cuDNN (SDPA)", "flex": "FlexAttention"}
COLOURS = {"kgen": "#d62728", "flash": "#1f77b4", "cudnn": "#2ca02c", "flex": "#9467bd"}


def read_table(text, heading_prefix):
    """Rows of the first markdown table after the first heading starting with heading_prefix,
    as dicts of column name -> cell text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_prefix))
    i = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("|"))
    header = [c.strip() for c in lines[i].strip("|").split("|")]
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def tflops(cell):
    m = re.search(r"·\s*([0-9.]+)", cell)  # "0.311 · 442" -> 442
    return float(m.group(1)) if m else None


def standard_grid(rows):
    """{(d, causal): [(n, {impl: TFLOPS})]} for the rows of the standard grid."""
    grid = {}
    for r in rows:
        n, d, bh = int(r["n"]), int(r["d"]), r["b×h"]
        if "/" in bh:  # grouped-query rows (h_q/h_kv)
            continue
        b, h = (int(x) for x in bh.split("×"))
        if n < 1024 or b * n != 16384 or h * d != 2048:
            continue
        grid.setdefault((d, r["causal"]), []).append((n, {p: tflops(r[p]) for p in PEERS if p in r}))
    return grid


def plot(grid, title, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(grid, key=lambda k: (k[1] == "yes", k[0]))
    cols = len({k[0] for k in keys})
    fig, axes = plt.subplots(2, cols, figsize=(4.2 * cols, 6.6), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        d, causal = key
        cells = sorted(grid[key])
        width = 0.8 / len(PEERS)
        for k, peer in enumerate(PEERS):
            xs = [i + (k - (len(PEERS) - 1) / 2) * width for i in range(len(cells))]
            ys = [c[1].get(peer) or 0 for c in cells]
            bars = ax.bar(xs, ys, width, label=LABELS[peer], color=COLOURS[peer])
            ax.bar_label(bars, labels=[f"{y:.0f}" if y else "" for y in ys], fontsize=6, padding=1)
        ax.set_xticks(range(len(cells)), [f"{n // 1024}k" for n, _ in cells])
        ax.set_title(f"d = {d}, {'causal' if causal == 'yes' else 'no mask'}", fontsize=10)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOPS")
        ax.set_ylim(0, max(max(v or 0 for v in c[1].values()) for c in cells) * 1.15)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=len(PEERS), frameon=False)
    fig.suptitle(title, y=0.99, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", type=pathlib.Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    text = args.benchmarks.read_text()
    fwd = standard_grid(read_table(text, "### Forward ("))
    bwd = standard_grid(read_table(text, "### Backward ("))
    plot(fwd, "Attention forward, bf16, H200 (2026-11-28): b·n = 16k, h·d = 2048",
         args.out / "attention_forward_h200.png")
    plot(bwd, "Attention backward (dQ, dK, dV), bf16, H200 (2026-11-28): b·n = 16k, h·d = 2048",
         args.out / "attention_backward_h200.png")


if __name__ == "__main__":
    main()
