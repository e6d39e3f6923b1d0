"""Timing and peak memory of training steps.

A step is a list of phases (forward, backward, optimizer step); `measure` runs `warmup` untimed
steps, then `steps` timed ones, and returns per-phase times of each timed step. Two clocks:
  sync    torch.cuda.synchronize() then time.perf_counter() at every phase boundary (what CS336
          does); each phase's time includes the host work of launching it.
  events  CUDA events recorded at the boundaries, one synchronize at the end of the step: GPU
          time between the boundaries (idle gaps while the host is behind still count).
Either way, host time (from the phase's start to the return of its Python call, before any
synchronize) is recorded too: where it approaches the phase's time, the phase is host-bound.
Peak memory is read on the first step (warm-up or timed): torch.cuda.memory_allocated() before
it, max_memory_allocated() after each phase, in MiB.
"""
from __future__ import annotations

import gc
import math
import statistics
import time

import torch

MiB = 1 << 20


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


class StepClock:
    def __init__(self, kind: str, device: str, memory: bool):
        self.kind = kind if device == "cuda" else "sync"
        self.device = device
        self.memory = memory and device == "cuda"

    def begin(self):
        if self.memory:
            torch.cuda.reset_peak_memory_stats()
            self.mem = [torch.cuda.memory_allocated() / MiB]
        sync(self.device)
        self.starts = [time.perf_counter()]  # phase starts (sync clock) / step start (events)
        self.returns = []
        if self.kind == "events":
            self.events = [torch.cuda.Event(enable_timing=True)]
            self.events[0].record()

    def mark(self):
        """End of a phase: its Python call has returned."""
        self.returns.append(time.perf_counter())
        if self.memory:
            self.mem.append(torch.cuda.max_memory_allocated() / MiB)
        if self.kind == "events":
            self.events.append(torch.cuda.Event(enable_timing=True))
            self.events[-1].record()
        else:
            sync(self.device)
            self.starts.append(time.perf_counter())

    def end(self):
        """(phase times, phase host times) in seconds."""
        if self.kind == "events":
            self.events[-1].synchronize()
            times = [a.elapsed_time(b) / 1e3 for a, b in zip(self.events, self.events[1:])]
            host = [r - s for r, s in zip(self.returns, self.starts + self.returns)]
        else:
            times = [b - a for a, b in zip(self.starts, self.starts[1:])]
            host = [r - s for r, s in zip(self.returns, self.starts)]
        return times, host


def measure(step, *, warmup: int, steps: int, clock: str, device: str):
    """Run `step(clock)` (which calls clock.mark() after each phase) warmup + steps times.
    Returns {"times": [[phase s] per timed step], "host": [...], "memory": [MiB before, after
    each phase] of the first step or None}."""
    c = StepClock(clock, device, memory=True)
    times, host, memory = [], [], None
    for i in range(warmup + steps):
        c.begin()
        step(c)
        t, h = c.end()
        if i == 0 and c.memory:
            memory = c.mem
        if i >= warmup:
            times.append(t)
            host.append(h)
    return {"times": times, "host": host, "memory": memory}


def stats(values):
    values = list(values)
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.pstdev(values)


def free(device: str):
    """Release what the last configuration left behind (call outside any except block, so that
    no traceback still holds its tensors)."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()
