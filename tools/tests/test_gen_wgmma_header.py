"""templates/kgen_device/core/wgmma.cuh and wgmma_fp8.cuh are generated: each must equal
tools/gen_wgmma_header.py's output, so an edit to a header alone (lost at the next generation)
fails here."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gen_wgmma_header  # noqa: E402


def test_the_checked_in_header_is_the_scripts_output():
    header = (ROOT / "templates" / "kgen_device" / "core" / "wgmma.cuh").read_text()
    assert gen_wgmma_header.header() == header, (
        "templates/kgen_device/core/wgmma.cuh differs from tools/gen_wgmma_header.py's output: edit the script and "
        "regenerate with `python3 tools/gen_wgmma_header.py > templates/kgen_device/core/wgmma.cuh`"
    )


def test_the_checked_in_fp8_header_is_the_scripts_output():
    header = (ROOT / "templates" / "kgen_device" / "core" / "wgmma_fp8.cuh").read_text()
    assert gen_wgmma_header.header_fp8() == header, (
        "templates/kgen_device/core/wgmma_fp8.cuh differs from tools/gen_wgmma_header.py --fp8's output: edit the "
        "script and regenerate with `python3 tools/gen_wgmma_header.py --fp8 > templates/kgen_device/core/wgmma_fp8.cuh`"
    )


def test_every_width_extends_a_narrower_one_by_whole_groups():
    for n, base in gen_wgmma_header.BASE.items():
        assert n % 16 == 0
        assert base is None or (base < n and base in gen_wgmma_header.BASE)


def test_the_checked_in_keys_header_is_the_scripts_output():
    header = (ROOT / "templates" / "kgen_device" / "core" / "wgmma_keys.cuh").read_text()
    assert gen_wgmma_header.header_keys() == header, (
        "templates/kgen_device/core/wgmma_keys.cuh differs from tools/gen_wgmma_header.py --keys's output: edit the "
        "script and regenerate with `python3 tools/gen_wgmma_header.py --keys > templates/kgen_device/core/wgmma_keys.cuh`"
    )
    # Its widths are none of wgmma.cuh's: one specialisation of wgmma::Mma per width.
    assert not set(gen_wgmma_header.BASE_KEYS) & set(gen_wgmma_header.BASE)


def test_the_checked_in_narrow_header_is_the_scripts_output():
    header = (ROOT / "templates" / "kgen_device" / "core" / "wgmma_keys24.cuh").read_text()
    assert gen_wgmma_header.header_keys(gen_wgmma_header.BASE_NARROW, gen_wgmma_header.PREFIX_NARROW, "KGEN_WN_") == header, (
        "templates/kgen_device/core/wgmma_keys24.cuh differs from tools/gen_wgmma_header.py --narrow's output: edit "
        "the script and regenerate with `python3 tools/gen_wgmma_header.py --narrow > "
        "templates/kgen_device/core/wgmma_keys24.cuh`"
    )
    # One specialisation of wgmma::Mma per width over the three headers; a width 8 past a multiple
    # of 16 ends in four registers.
    narrow = set(gen_wgmma_header.BASE_NARROW)
    assert not narrow & (set(gen_wgmma_header.BASE_KEYS) | set(gen_wgmma_header.BASE))
    assert all(n % 8 == 0 for n in narrow)
    assert "KGEN_WN_ACC4(d, 8)" in header
