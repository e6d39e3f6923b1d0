"""Output: markdown tables in pandas' `to_markdown()` format (written here, so that neither pandas
nor tabulate is needed), PNG plots through matplotlib when it is importable, raw JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else format(v, "g")
    return str(v)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """`pandas.DataFrame(rows)[columns].to_markdown()`: an index column, numbers right-aligned,
    everything else left-aligned, floats with 6 significant digits."""
    cells = [[str(i)] + [_cell(r.get(c)) for c in columns] for i, r in enumerate(rows)]
    header = [""] + list(columns)
    right = [True] + [all(_numeric(r.get(c)) for r in rows if r.get(c) is not None) and
                      any(r.get(c) is not None for r in rows) for c in columns]
    # tabulate pads headers by 2
    widths = [max([len(header[j]) + 2] + [len(row[j]) for row in cells]) for j in range(len(header))]

    def line(values):
        return "| " + " | ".join(v.rjust(w) if r else v.ljust(w)
                                 for v, w, r in zip(values, widths, right)) + " |"
    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else (":" + "-" * (w + 1))
                          for w, r in zip(widths, right)) + "|"
    return "\n".join([line(header), rule] + [line(row) for row in cells])


def write_json(path: Path, data: dict):
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except Exception as e:  # noqa: BLE001 - any import failure means no plots
        print(f"plots skipped: matplotlib is not importable here ({type(e).__name__}: {e})")
        return None


def plot_lines(path: Path, title: str, panels: dict, xlabel: str, ylabel: str) -> bool:
    """One subplot per panel title; panels[title] = {line label: [(x, y), ...]}. Points whose y is
    NaN (OOM, failed check) are left out; log-log axes when x spans 4x or more."""
    plt = _pyplot()
    if plt is None or not panels:
        return False
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(8, 5 * cols), 3.8 * rows + 0.6), squeeze=False)
    for ax, (name, lines) in zip(axes.flat, panels.items()):
        xs_all = []
        for label, points in sorted(lines.items()):
            pts = sorted((x, y) for x, y in points if y is not None and not math.isnan(y))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
                xs_all += [p[0] for p in pts]
        if xs_all and max(xs_all) >= 4 * min(xs_all):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        if xs_all:
            ax.set_xticks(sorted(set(xs_all)), [str(x) for x in sorted(set(xs_all))])
            ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if xs_all:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "nothing ran (OOM / failed / skipped)", ha="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
