"""templates/kgen_device/core/wgmma*.cuh are generated: each must equal tools/gen_wgmma_header.py's
output, so an edit to a header alone (lost at the next generation) fails here."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gen_wgmma_header  # noqa: E402

G = gen_wgmma_header


def assert_generated(name, text, flag=""):
    """templates/kgen_device/core/`name` equals `text`, the script's output with `flag`."""
    header = (ROOT / "templates" / "kgen_device" / "core" / name).read_text()
    command = f"python3 tools/gen_wgmma_header.py{' ' + flag if flag else ''} > templates/kgen_device/core/{name}"
    assert text == header, (
        f"templates/kgen_device/core/{name} differs from tools/gen_wgmma_header.py{' ' + flag if flag else ''}'s "
        f"output: edit the script and regenerate with `{command}`"
    )
    return header


def test_the_checked_in_header_is_the_scripts_output():
    assert_generated("wgmma.cuh", G.header())


def test_the_checked_in_fp8_header_is_the_scripts_output():
    assert_generated("wgmma_fp8.cuh", G.header_fp8(), "--fp8")


def test_every_width_extends_a_narrower_one_by_whole_groups():
    for n, base in G.BASE.items():
        assert n % 16 == 0
        assert base is None or (base < n and base in G.BASE)


def test_the_checked_in_keys_header_is_the_scripts_output():
    assert_generated("wgmma_keys.cuh", G.header_keys(), "--keys")
    # Its widths are none of wgmma.cuh's: one specialisation of wgmma::Mma per width.
    assert not set(G.BASE_KEYS) & set(G.BASE)


def test_the_checked_in_narrow_header_is_the_scripts_output():
    header = assert_generated("wgmma_keys24.cuh", G.header_keys(G.BASE_NARROW, G.PREFIX_NARROW, "KGEN_WN_"), "--narrow")
    # One specialisation of wgmma::Mma per width over the three headers; a width 8 past a multiple
    # of 16 ends in four registers.
    narrow = set(G.BASE_NARROW)
    assert not narrow & (set(G.BASE_KEYS) | set(G.BASE))
    assert all(n % 8 == 0 for n in narrow)
    assert "KGEN_WN_ACC4(d, 8)" in header


def test_the_checked_in_cols_header_is_the_scripts_output():
    assert_generated("wgmma_cols.cuh", G.header_keys(G.BASE_COLS, G.PREFIX_COLS, "KGEN_WC_"), "--cols")
    # Together with the other headers: every multiple of 16 from 32 to 256 once (every width its
    # head_dim_width gives for head dims up to 256), no width twice.
    cols = set(G.BASE_COLS)
    others = set(G.BASE_KEYS) | set(G.BASE) | set(G.BASE_NARROW)
    assert not cols & others
    assert set(range(32, 257, 16)) <= cols | others
