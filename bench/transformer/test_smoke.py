"""Smoke test of the end-to-end benchmark on the CPU (`--device cpu --tiny`): the model, the
checks (naive and SDPA's math backend against the float64 reference; kgen reported as skipped),
the tables, the JSON and the plots. Skipped where PyTorch is not installed.

    python3 -m pytest -q bench/transformer/test_smoke.py
"""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def test_markdown_table_matches_pandas_layout():
    from bench.transformer.report import markdown_table
    text = markdown_table([{"model": "S", "context_length": 256, "fwd avg (sec)": 0.0101203, "status": "ok",
                            "compile": False},
                           {"model": "M", "context_length": 256, "fwd avg (sec)": float("nan"), "status": "OOM",
                            "compile": False}],
                          ["model", "context_length", "fwd avg (sec)", "status", "compile"])
    assert text.splitlines() == [
        "|    | model   |   context_length |   fwd avg (sec) | status   | compile   |",
        "|---:|:--------|-----------------:|----------------:|:---------|:----------|",
        "|  0 | S       |              256 |       0.0101203 | ok       | False     |",
        "|  1 | M       |              256 |             nan | OOM      | False     |",
    ]


def test_cpu_smoke_run(tmp_path):
    pytest.importorskip("torch")
    from bench.transformer.run import main
    main(["--device", "cpu", "--tiny", "--contexts", "32", "--variants", "fp32,bf16+adamw", "--steps", "1",
          "--attn-contexts", "64", "--attn-dims", "16", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["complete"]
    checks = {(c["attention"], c["dtype"]): c["status"] for c in data["checks"]}
    assert checks[("kgen", "float32")] == "skipped"
    assert checks[("naive", "bfloat16")] == checks[("sdpa-math", "float32")] == "ok"
    for table in ("e2e", "attention"):
        rows = data[table]
        assert {r["status"] for r in rows if r["attention"] != "kgen"} == {"ok"}
        assert all(r["fws & back avg (sec)"] > 0 for r in rows if r["status"] == "ok")
    losses = {r["attention"]: r["loss"] for r in data["e2e"] if r["variant"] == "fp32+warmup1" and r["status"] == "ok"}
    assert losses["naive"] == pytest.approx(losses["sdpa-math"], rel=1e-5)  # same weights, same tokens
    report = (tmp_path / "report.md").read_text()
    assert "fws & back avg (sec)" in report and "kgen runs on CUDA devices only" in report
    assert "## End to end: mixed precision (bf16 autocast), eager, 1 warm-up step, forward + backward + AdamW step" in report
    assert "optimizer avg (sec)" in report and "## Attention only" in report
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "e2e_fp32_warmup1.png").stat().st_size > 0
    assert (tmp_path / "attention_bf16_warmup1.png").stat().st_size > 0


def test_failed_check_and_oom_are_statuses(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from bench.transformer import attention as attn
    from bench.transformer.run import main
    calls = []

    def wrong(q, k, v):  # off by 1%: fails the check, so it is never timed
        return attn.naive(q, k, v) * 1.01

    def out_of_memory(q, k, v):  # passes the check (its first call), then runs out of memory
        calls.append(q.shape)
        if len(calls) > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return attn.naive(q, k, v)

    monkeypatch.setattr(attn, "make", lambda impl, device, compiled=False: {
        "naive": wrong, "sdpa-math": out_of_memory}[impl])
    main(["--device", "cpu", "--tiny", "--contexts", "32", "--variants", "fp32", "--steps", "1",
          "--impls", "naive,sdpa-math", "--no-attention", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["attention"]: r["status"] for r in data["e2e"]} == {"naive": "FAIL", "sdpa-math": "OOM"}
    assert all(r["fwd avg (sec)"] != r["fwd avg (sec)"] for r in data["e2e"])  # NaN: nothing timed
    report = (tmp_path / "report.md").read_text()
    assert "FAIL" in report and "OOM" in report
