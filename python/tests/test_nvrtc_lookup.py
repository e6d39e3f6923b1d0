"""Without a CUDA toolkit, kgen's Python package finds NVRTC in the NVIDIA wheels that
pip-installed PyTorch brings (no GPU, no torch needed)."""
from kgen import _lib


def _wheel(root, name):
    path = root / "nvidia" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    return str(path)


def test_the_newest_wheel_nvrtc_on_the_path_is_found(tmp_path):
    old = _wheel(tmp_path / "a", "cuda_nvrtc/lib/libnvrtc.so.12")
    assert _lib.wheel_nvrtc([str(tmp_path / "a")]) == old
    new = _wheel(tmp_path / "b", "cu13/lib/libnvrtc.so.13")
    assert _lib.wheel_nvrtc([str(tmp_path / "a"), str(tmp_path / "b")]) == new
    assert _lib.wheel_nvrtc([str(tmp_path / "c")]) is None


def test_kgen_nvrtc_path_is_set_only_without_a_toolkit_and_without_the_users_choice(tmp_path, monkeypatch):
    found = _wheel(tmp_path, "cu13/lib/libnvrtc.so.13")
    monkeypatch.setattr(_lib.sys, "path", [str(tmp_path)])
    monkeypatch.delenv("KGEN_NVRTC_PATH", raising=False)
    monkeypatch.setattr(_lib, "system_nvrtc", lambda: True)
    assert _lib.point_at_wheel_nvrtc() is None  # a toolkit's NVRTC: the library finds it itself
    monkeypatch.setattr(_lib, "system_nvrtc", lambda: False)
    assert _lib.point_at_wheel_nvrtc() == found
    assert _lib.os.environ["KGEN_NVRTC_PATH"] == found
    monkeypatch.setenv("KGEN_NVRTC_PATH", "/mine/libnvrtc.so")
    assert _lib.point_at_wheel_nvrtc() is None  # the user's choice stays
    assert _lib.os.environ["KGEN_NVRTC_PATH"] == "/mine/libnvrtc.so"
