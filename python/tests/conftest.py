"""Puts python/ on sys.path (no install needed) and offers the `kgen_library` fixture and the
validate-only mode of the tests' stand-ins for the library."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgen import _lib  # noqa: E402


@pytest.fixture(scope="session")
def kgen_library():
    """The loaded libkgen.so. Skips if KGEN_LIBRARY is unset and no build is found; if
    KGEN_LIBRARY is set, a library that fails to load is an error, not a skip."""
    if not os.environ.get("KGEN_LIBRARY") and _lib.find_library() is None:
        pytest.skip("libkgen.so not built: set KGEN_LIBRARY or build into build/lib/")
    return _lib.library()


class StandInMode:
    """kgen_validate_only for a stand-in of the library (tests that replace _lib.function): while
    on, the stand-in's calls return OK and touch nothing, as the library's validate-only calls do."""

    def __init__(self):
        self.on = 0

    def __call__(self, on: int) -> int:
        previous, self.on = self.on, int(on)
        return previous
