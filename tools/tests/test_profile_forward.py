"""bench/profile_forward.py: its row syntax and its --help, with no GPU and no torch."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from profile_forward import parse_row  # noqa: E402


def test_rows_parse_to_head_dim_mask_length_batch_and_heads():
    assert parse_row("128:yes:256:64x16") == (128, True, 256, 64, 16)
    assert parse_row("64:no:1024:16x32") == (64, False, 1024, 16, 32)


@pytest.mark.parametrize("text", ["128:maybe:256:64x16", "128:yes:256", "128:yes:256:64", "d:yes:256:64x16",
                                  "128:yes:256:64x16:1"])
def test_a_bad_row_names_itself_and_the_form(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"'{text}' is not d:causal:n:bxh"):
        parse_row(text)


def test_help_needs_no_torch():
    out = subprocess.run([sys.executable, str(BENCH / "profile_forward.py"), "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--rows" in out and "cuDNN" in out
