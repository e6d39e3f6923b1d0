"""Timing several implementations of one row so that they meet the same GPU clock.

Under sustained load a power-capped GPU lowers its SM clock within a second (docs/attention.md
§6), so an implementation timed after another one's reps runs at a lower clock than the first.
interleaved() splits each implementation's reps into rounds and rotates their order from round
to round. No torch here: the compare scripts pass their own timers.
"""
from __future__ import annotations

import math
import statistics


def size(text: str) -> int:
    """An integer of a command-line size, with an optional k suffix (1k = 1024, 1.5k = 1536)."""
    text = text.strip().lower()
    return int(float(text[:-1]) * 1024) if text.endswith("k") else int(text)


def sizes(text: str) -> list[int]:
    """Comma-separated size() values."""
    return [size(x) for x in text.split(",")]


def write_table(lines, out: str = "", show: bool = True) -> None:
    """The table's lines printed (unless `show` is False: a script that printed its rows as they
    came) and, with `out`, written to that file too."""
    text = "\n".join(lines)
    if show:
        print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def add_round_args(ap, reps: int, rounds: int = 3) -> None:
    """The compare scripts' timing and output options on argparse parser `ap`: --reps (default
    `reps`), --warmup, --rounds (default `rounds`) and --out."""
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", default="", help="also write the table (markdown) here")


def interleaved(runs, time_round, reps, warmup, rounds):
    """{name: (median ms, median host µs)} of the callables `runs` ({name: run}): `rounds` rounds
    of ⌈reps / rounds⌉ timed calls each, the implementations' order rotating from round to round,
    so that each meets the GPU's clock at the same points of the row (under sustained load a
    power-capped clock falls within a second: docs/attention.md §6). time_round(run, reps,
    warmup) gives (ms of each call, host µs per call); round 0 warms up `warmup` calls, later
    rounds ⌈warmup / rounds⌉."""
    names = list(runs)
    samples, host = {name: [] for name in names}, {name: [] for name in names}
    per_round = max(1, math.ceil(reps / rounds))
    for r in range(rounds):
        shift = r % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            ms, us = time_round(runs[name], per_round, warmup if r == 0 else math.ceil(warmup / rounds))
            samples[name] += ms
            host[name].append(us)
    return {name: (statistics.median(samples[name]), statistics.median(host[name])) for name in names}
