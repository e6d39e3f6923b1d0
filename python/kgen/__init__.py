"""kgen: attention kernels compiled at run time (NVRTC), called through kgen's C API.

    import kgen.torch
    o, lse = kgen.torch.attention_forward(q, k, v, causal=True, return_lse=True)

Importing kgen loads nothing: the shared library is located on first use ($KGEN_LIBRARY, else
the libkgen.so that `pip install .` put beside this file, else the source tree's build/), and `kgen.torch` (which needs PyTorch) is imported on first access.
A failed call raises KgenError with the C library's message and status.
"""
from __future__ import annotations

import importlib

from ._lib import KgenError, Status, library_path

__all__ = ["KgenError", "Status", "library_path", "torch", "__version__"]


def __getattr__(name: str):
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    if name == "__version__":
        from ._lib import version
        try:
            return version()
        except KgenError:
            return "unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
