"""bench/rounds.py: interleaved timing, against a simulated GPU whose clock falls as calls go on
(a power cap under sustained load), with no GPU and no torch."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from rounds import interleaved  # noqa: E402


class CappedGpu:
    """A call of cost c ms takes c·(1 + 0.12·min(1, calls so far / ramp_calls)): the clock falls
    by 12 % over the first ramp_calls calls, warm-up included. Records the order of the rounds."""

    def __init__(self, ramp_calls):
        self.calls, self.ramp_calls, self.order = 0, ramp_calls, []

    def time_round(self, run, reps, warmup):
        name, cost = run
        self.order.append((name, reps, warmup))
        times = []
        for i in range(warmup + reps):
            self.calls += 1
            t = cost * (1 + 0.12 * min(1.0, self.calls / self.ramp_calls)) if self.ramp_calls else cost
            if i >= warmup:
                times.append(t)
        return times, 5.0


def test_rotates_the_order_and_splits_the_reps():
    gpu = CappedGpu(ramp_calls=0)
    runs = {"a": ("a", 1.0), "b": ("b", 2.0), "c": ("c", 3.0)}
    result = interleaved(runs, gpu.time_round, reps=30, warmup=5, rounds=3)
    assert [name for name, _, _ in gpu.order] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(reps == 10 for _, reps, _ in gpu.order)
    assert [w for _, _, w in gpu.order] == [5, 5, 5, 2, 2, 2, 2, 2, 2]
    assert result == {"a": (1.0, 5.0), "b": (2.0, 5.0), "c": (3.0, 5.0)}


def test_equal_kernels_come_closer_under_a_falling_clock():
    # Timed one after the other, the second of two equal kernels meets a lower clock than the
    # first and looks slower; in rotated rounds both see the same mix of clocks.
    runs = {"first": ("first", 1.0), "second": ("second", 1.0)}
    one_block = interleaved(runs, CappedGpu(ramp_calls=120).time_round, reps=30, warmup=5, rounds=1)
    block_gap = one_block["second"][0] - one_block["first"][0]
    assert block_gap > 0.03
    rotated = interleaved(runs, CappedGpu(ramp_calls=120).time_round, reps=30, warmup=5, rounds=6)
    assert abs(rotated["second"][0] - rotated["first"][0]) < block_gap / 4


def test_no_implementation_and_more_rounds_than_reps():
    assert interleaved({}, CappedGpu(ramp_calls=0).time_round, reps=10, warmup=1, rounds=3) == {}
    gpu = CappedGpu(ramp_calls=0)
    assert interleaved({"a": ("a", 1.0)}, gpu.time_round, reps=2, warmup=0, rounds=4) == {"a": (1.0, 5.0)}
    assert [reps for _, reps, _ in gpu.order] == [1, 1, 1, 1]


def test_write_table_prints_and_writes_the_same_lines(tmp_path, capsys):
    from rounds import write_table
    out = tmp_path / "table.md"
    write_table(["| a |", "|---|", "| 1 |"], str(out))
    assert capsys.readouterr().out == "| a |\n|---|\n| 1 |\n"
    assert out.read_text() == "| a |\n|---|\n| 1 |\n"
    write_table(["x"], "", show=False)
    assert capsys.readouterr().out == ""
