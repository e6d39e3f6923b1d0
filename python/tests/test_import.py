"""No-GPU, no-torch tests of the Python package and its ctypes layer (run in CI)."""
import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kgen
from kgen import _lib

PYTHON_DIR = str(Path(__file__).resolve().parents[1])


def run_python(code, **env):
    """Run `code` in a fresh interpreter (clean sys.modules) with python/ on the path."""
    full_env = {**os.environ, "PYTHONPATH": PYTHON_DIR, **env}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, check=True).stdout


def test_import_loads_neither_library_nor_torch():
    out = run_python("import sys, kgen, kgen._lib as L\n"
                     "print('torch' in sys.modules, 'kgen.torch' in sys.modules, L._lib)")
    assert out.split() == ["False", "False", "None"]


@pytest.mark.parametrize("module", ["kgen.torch", "kgen.flash_attn_interface"])
def test_torch_modules_without_torch_say_how_to_install_it(module):
    out = run_python("import sys\nsys.modules['torch'] = None  # as if PyTorch were not installed\n"
                     f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)")
    assert f"{module} needs PyTorch 2.4 or later: pip install 'kgen[torch]'" in out


def test_public_names():
    assert issubclass(kgen.KgenError, RuntimeError)
    assert isinstance(kgen.__version__, str) and kgen.__version__
    assert {"KgenError", "torch", "__version__"} <= set(dir(kgen))


def test_missing_library_fails_on_first_call_only(monkeypatch):
    monkeypatch.delenv("KGEN_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "CANDIDATES", ())
    monkeypatch.setattr(_lib, "_lib", None)
    assert kgen.__version__ == "unknown"
    with pytest.raises(kgen.KgenError, match="libkgen.so not found: set KGEN_LIBRARY") as e:
        _lib.version()
    assert e.value.status is None


def test_bad_kgen_library_path_is_reported(tmp_path):
    missing = tmp_path / "nope" / "libkgen.so"
    out = run_python("import kgen, kgen._lib as L\nprint(kgen.__version__)\n"
                     "try:\n    L.library()\nexcept kgen.KgenError as e:\n    print(e)",
                     KGEN_LIBRARY=str(missing))
    version, message = out.splitlines()
    assert version == "unknown"
    assert f"cannot load {missing} (from KGEN_LIBRARY)" in message


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="offsets are for 64-bit ABIs")
def test_struct_layout_matches_c_headers():
    # dlpack.h: void* data | DLDevice {int32 type, int32 id} | int32 ndim |
    # DLDataType {uint8 code, uint8 bits, uint16 lanes} | int64* shape | int64* strides |
    # uint64 byte_offset
    assert (ctypes.sizeof(_lib.DLDevice), ctypes.sizeof(_lib.DLDataType)) == (8, 4)
    assert [_lib.DLDataType.code.offset, _lib.DLDataType.bits.offset,
            _lib.DLDataType.lanes.offset] == [0, 1, 2]
    offsets = {name: getattr(_lib.DLTensor, name).offset for name, _ in _lib.DLTensor._fields_}
    assert offsets == {"data": 0, "device": 8, "ndim": 16, "dtype": 20, "shape": 24,
                       "strides": 32, "byte_offset": 40}
    assert ctypes.sizeof(_lib.DLTensor) == 48
    # c_api.h: kgen_attention_options {double scale; int causal;}
    assert (_lib.AttentionOptions.scale.offset, _lib.AttentionOptions.causal.offset) == (0, 8)
    assert ctypes.sizeof(_lib.AttentionOptions) == 16
    # c_api.h: kgen_lrpe_options {int act; int64 offset; int dims; int64 grid[3]; int extra;
    # const char* config; void* workspace; size_t workspace_bytes;}
    offsets = {name: getattr(_lib.LrpeOptions, name).offset for name, _ in _lib.LrpeOptions._fields_}
    assert offsets == {"act": 0, "offset": 8, "dims": 16, "grid": 24, "extra": 48, "config": 56,
                       "workspace": 64, "workspace_bytes": 72}
    assert ctypes.sizeof(_lib.LrpeOptions) == 80


def test_dltensor_builder_views_numpy_in_place():
    np = pytest.importorskip("numpy")
    a = np.zeros((2, 8, 3, 64), dtype=np.float16).transpose(0, 2, 1, 3)  # BNHD as (b, h, n, d)
    t = _lib.dltensor(a.ctypes.data, a.shape, [s // a.itemsize for s in a.strides],
                      (_lib.kDLFloat, 16), (_lib.kDLCPU, 0))
    assert t.data == a.ctypes.data and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id, t.ndim) == (_lib.kDLCPU, 0, 4)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (_lib.kDLFloat, 16, 1)
    assert list(t.shape[:4]) == [2, 3, 8, 64]
    assert list(t.strides[:4]) == [8 * 3 * 64, 64, 3 * 64, 1]


def test_library_found_via_env(kgen_library, monkeypatch, tmp_path):
    path = _lib.library_path()
    monkeypatch.setenv("KGEN_LIBRARY", path)
    assert _lib.find_library() == path
    out = run_python("import kgen\nprint(kgen.__version__, kgen.library_path())",
                     KGEN_LIBRARY=path)
    assert out.split() == [_lib.version(), path]
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", _lib.version())


def numpy_attention_args(np):
    """DLTensors for a well-formed fp16 forward (b=1, h=2, n=8, d=64) living on the CPU."""
    arrays = [np.ones((1, 2, 8, 64), np.float16) for _ in range(4)] + [np.ones((1, 2, 8), np.float32)]
    tensors = [_lib.dltensor(a.ctypes.data, a.shape, [s // a.itemsize for s in a.strides],
                             (_lib.kDLFloat, a.itemsize * 8), (_lib.kDLCPU, 0)) for a in arrays]
    return arrays, tensors


def test_forward_rejects_cpu_tensors_naming_q(kgen_library):
    np = pytest.importorskip("numpy")
    arrays, tensors = numpy_attention_args(np)
    options = _lib.AttentionOptions(scale=0.0, causal=0)
    status = kgen_library.kgen_attention_forward(*map(ctypes.byref, tensors),
                                                 ctypes.byref(options), None)
    message = _lib.last_error()
    assert status == _lib.Status.INVALID_ARGUMENT, message
    assert re.search(r"\bq\b", message), message
    with pytest.raises(kgen.KgenError) as e:  # the same through the checked path
        _lib.call("kgen_attention_forward", *map(_lib.ref, tensors), ctypes.byref(options), None)
    assert e.value.status == _lib.Status.INVALID_ARGUMENT and str(e.value) == message


def test_search_order_without_env(monkeypatch, tmp_path):
    monkeypatch.delenv("KGEN_LIBRARY", raising=False)
    found = tmp_path / "build" / "libkgen.so"
    found.parent.mkdir()
    found.touch()
    monkeypatch.setattr(_lib, "CANDIDATES", (tmp_path / "build" / "lib" / "libkgen.so", found))
    assert _lib.find_library() == str(found)


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="offsets are for 64-bit ABIs")
@pytest.mark.parametrize("fmt,structure,values", [
    (_lib.ATTENTION_OPTIONS, _lib.AttentionOptions, {"scale": 0.5, "causal": 1}),
    (_lib.ATTENTION_BACKWARD_OPTIONS, _lib.AttentionBackwardOptions,
     {"scale": 0.5, "causal": 1, "deterministic": 1, "workspace": 77, "workspace_bytes": 88, "config": 99}),
    (_lib.LRPE_OPTIONS, _lib.LrpeOptions, {"act": 4, "offset": -5, "dims": 2, "grid": [7, 8, 9], "extra": 3,
                                           "config": 11, "workspace": 12, "workspace_bytes": 13}),
])
def test_packed_options_match_the_structures(fmt, structure, values):
    """The struct formats the hot path packs give the bytes of the ctypes structures (c_api.h)."""
    frame = _lib.Frame(fmt, ())
    flat = [x for v in values.values() for x in (v if isinstance(v, list) else [v])]
    frame.pack(flat)
    assert frame.struct.size == ctypes.sizeof(structure)
    s = structure.from_address(frame.options)
    for name, expected in values.items():
        if name == "config":  # a char*: read the address, not the string
            got = ctypes.c_void_p.from_address(frame.options + structure.config.offset).value
        else:
            got = getattr(s, name)
        assert (list(got) if name == "grid" else got) == expected, name


def test_frame_packs_descriptors_like_dltensor():
    frame = _lib.Frame(_lib.ATTENTION_OPTIONS, (4, None, 3))
    assert frame.tensors[1] is None
    values = [0.0, 0]
    shapes = {0: ((2, 3, 5, 64), (960, 64, 192, 1)), 2: ((2, 3, 5), (15, 5, 1))}
    for i, (shape, strides) in shapes.items():
        _, shape_at, strides_at = frame.tensors[i]
        values += [4096 * (i + 1), _lib.kDLCUDA, 1, len(shape), _lib.kDLBfloat, 16, 1, shape_at, strides_at, 0,
                   *shape, *strides]
    frame.pack(values)
    for i, (shape, strides) in shapes.items():
        t = _lib.DLTensor.from_address(frame.tensors[i][0])
        reference = _lib.dltensor(4096 * (i + 1), shape, strides, (_lib.kDLBfloat, 16), (_lib.kDLCUDA, 1))
        for name, _ in _lib.DLTensor._fields_:
            if name in ("shape", "strides", "device", "dtype"):
                continue
            assert getattr(t, name) == getattr(reference, name), name
        assert (t.device.device_type, t.device.device_id) == (_lib.kDLCUDA, 1)
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (_lib.kDLBfloat, 16, 1)
        assert list(t.shape[:t.ndim]) == list(shape) and list(t.strides[:t.ndim]) == list(strides)
