"""tools/ncu_lines.py on small hand-made inputs: a kgen cache entry, an nvdisasm -g listing and
an ncu source-page CSV (no GPU, no nvdisasm: a stand-in script prints the listing)."""
import hashlib
import stat
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ncu_lines  # noqa: E402

LISTING = """\t.target\tsm_90a
//--------------------- .text.other_kernel --------------------------
.text.other_kernel:
\t//## File "/x/kgen_device/core/math.cuh", line 9
        /*0000*/                   MOV R1, R2 ;
//--------------------- .text.kgen_k --------------------------
.text.kgen_k:
\t//## File "/work/tree/kgen_k.cu", line 4
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/work/tree/kgen_device/core/wgmma.cuh", line 43
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
\t//## File "/work/tree/kgen_device/attention/backward_ws.cuh", line 195
        /*0030*/                   SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ+0x30], RZ ;
"""

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_long_sb",'
          '"stall_barrier (Not Issued)"')


def csv_text(rows, kernel="kgen_k"):
    lines = [f'"Kernel Name","{kernel}",', HEADER]
    lines += [f'"{a}","{s}","{n}","{b}","{l}","0"' for a, s, n, b, l in rows]
    return "\n".join(lines) + "\n"


ROWS = [("0x7f0000000400", "LDC R1, c[0x0][0x28]", 10, 0, 0),
        ("0x7f0000000410", "WARPGROUP.DEPBAR.LE gsb0, 0x0", 50, 48, 0),
        ("0x7f0000000420", "@!P0  BRA 0x7f0000000500", 30, 0, 25),
        ("0x7f0000000430", "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ+0x30], RZ", 10, 0, 9)]


def entry(binary: bytes, key=b"abc", meta=b"{}") -> bytes:
    body = b"KGEN\x01" + struct.pack("<I", 1)
    for part in (key, meta, binary):
        body += struct.pack("<Q", len(part)) + part
    return body + hashlib.sha256(body).digest()


def test_cubin_of_reads_entries_and_elf_and_rejects_the_rest():
    elf = b"\x7fELF" + bytes(60)
    assert ncu_lines.cubin_of(elf) == elf
    assert ncu_lines.cubin_of(entry(elf)) == elf
    damaged = bytearray(entry(elf))
    damaged[-40] ^= 1
    with pytest.raises(ValueError, match="checksum"):
        ncu_lines.cubin_of(bytes(damaged))
    with pytest.raises(ValueError, match="add up"):
        ncu_lines.cubin_of(entry(elf) + b"x")
    with pytest.raises(ValueError, match="magic"):
        ncu_lines.cubin_of(b"PK\x03\x04")


def test_listing_lines_of_one_function_with_template_paths():
    lines = ncu_lines.lines_by_offset(LISTING, "kgen_k")
    assert lines == {0x00: ("/work/tree/kgen_k.cu", 4, "LDC"),
                     0x10: ("kgen_device/core/wgmma.cuh", 43, "WARPGROUP.DEPBAR.LE"),
                     0x20: ("kgen_device/core/wgmma.cuh", 43, "BRA"),
                     0x30: ("kgen_device/attention/backward_ws.cuh", 195, "SYNCS.ARRIVE.TRANS64.A1T0")}
    assert ncu_lines.lines_by_offset(LISTING, "other_kernel") == {0: ("kgen_device/core/math.cuh", 9, "MOV")}


def test_samples_summed_per_line_with_reasons():
    sass = ncu_lines.read_sass_csv(csv_text(ROWS))
    assert sass.kernel == "kgen_k" and [r[0] for r in sass.rows] == [0, 0x10, 0x20, 0x30]
    ranked, reasons, total = ncu_lines.by_line(sass, ncu_lines.lines_by_offset(LISTING, "kgen_k"))
    assert total == 100
    assert ranked[0] == (("kgen_device/core/wgmma.cuh", 43), 80)
    assert reasons[("kgen_device/core/wgmma.cuh", 43)] == {"barrier": 48, "long_sb": 25}
    assert dict(ranked) == {("kgen_device/core/wgmma.cuh", 43): 80, ("/work/tree/kgen_k.cu", 4): 10,
                            ("kgen_device/attention/backward_ws.cuh", 195): 10}


EXECUTED_HEADER = HEADER + ',"Instructions Executed"'


def executed_csv(counts):
    lines = ['"Kernel Name","kgen_k",', EXECUTED_HEADER]
    lines += [f'"{a}","{s}","{n}","{b}","{l}","0","{e:,}"' for (a, s, n, b, l), e in zip(ROWS, counts)]
    return "\n".join(lines) + "\n"


def test_executed_instructions_summed_per_line_with_opcodes():
    lines = ncu_lines.lines_by_offset(LISTING, "kgen_k")
    sass = ncu_lines.read_sass_csv(executed_csv([1, 2000, 3000, 500]))
    assert sass.executed == {0: 1, 0x10: 2000, 0x20: 3000, 0x30: 500}
    ranked, opcodes, total = ncu_lines.executed_by_line(sass, lines)
    assert total == 5501
    assert ranked == [(("kgen_device/core/wgmma.cuh", 43), 5000), (("kgen_device/attention/backward_ws.cuh", 195), 500),
                      (("/work/tree/kgen_k.cu", 4), 1)]
    assert opcodes[("kgen_device/core/wgmma.cuh", 43)] == {"BRA": 3000, "WARPGROUP": 2000}
    assert opcodes[("kgen_device/attention/backward_ws.cuh", 195)] == {"SYNCS": 500}
    # an export without the column says which section it needs
    with pytest.raises(ValueError, match="SourceCounters"):
        ncu_lines.executed_by_line(ncu_lines.read_sass_csv(csv_text(ROWS)), lines)


def test_a_different_binary_is_refused():
    lines = ncu_lines.lines_by_offset(LISTING, "kgen_k")
    swapped = [ROWS[0], (ROWS[1][0],) + ROWS[2][1:], (ROWS[2][0],) + ROWS[1][1:], ROWS[3]]  # two opcodes moved
    with pytest.raises(ValueError, match="not the profiled binary"):
        ncu_lines.by_line(ncu_lines.read_sass_csv(csv_text(swapped)), lines)
    with pytest.raises(ValueError, match="not the profiled binary"):
        ncu_lines.by_line(ncu_lines.read_sass_csv(csv_text(ROWS[:3])), lines)


def test_csv_without_its_columns_is_refused():
    with pytest.raises(ValueError, match="Kernel Name"):
        ncu_lines.read_sass_csv("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match="Address"):
        ncu_lines.read_sass_csv('"Kernel Name","k",\n"Source","x"\n"a","b"\n')


def stand_in_inputs(tmp_path, csv: str) -> str:
    """sass.csv (`csv`) and k.kgen in tmp_path, and an nvdisasm there that prints LISTING; its path."""
    listing = tmp_path / "listing.txt"
    listing.write_text(LISTING)
    tool = tmp_path / "nvdisasm"
    tool.write_text(f"#!/bin/sh\ncat '{listing}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "sass.csv").write_text(csv)
    (tmp_path / "k.kgen").write_bytes(entry(b"\x7fELF" + bytes(60)))
    return str(tool)


def test_main_end_to_end_with_a_stand_in_nvdisasm(tmp_path, capsys):
    tool = stand_in_inputs(tmp_path, csv_text(ROWS))
    templates = tmp_path / "templates" / "kgen_device" / "core"
    templates.mkdir(parents=True)
    (templates / "wgmma.cuh").write_text("\n" * 42 + "asm volatile(wait);\n")
    rc = ncu_lines.main([str(tmp_path / "sass.csv"), str(tmp_path / "k.kgen"), "--nvdisasm", tool,
                         "--templates", str(tmp_path / "templates"), "--top", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "kgen_k: 4 instructions, 100 warp samples" in out
    assert "80.0 %  kgen_device/core/wgmma.cuh:43  (barrier 48, long_sb 25)" in out
    assert "asm volatile(wait);" in out
    assert out.count(" %  ") == 2


def test_main_counts_instructions(tmp_path, capsys):
    tool = stand_in_inputs(tmp_path, executed_csv([0, 600, 300, 100]))
    rc = ncu_lines.main([str(tmp_path / "sass.csv"), str(tmp_path / "k.kgen"), "--nvdisasm", tool,
                         "--count", "instructions"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "kgen_k: 4 instructions, 1000 instructions executed (warp-level)" in out
    assert " 90.0 %           900  kgen_device/core/wgmma.cuh:43  (WARPGROUP 600, BRA 300)" in out
    assert " 10.0 %           100  kgen_device/attention/backward_ws.cuh:195  (SYNCS 100)" in out


def test_main_reports_bad_input_without_a_traceback(tmp_path, capsys):
    (tmp_path / "sass.csv").write_text(csv_text(ROWS))
    (tmp_path / "k.bin").write_bytes(b"not a binary")
    rc = ncu_lines.main([str(tmp_path / "sass.csv"), str(tmp_path / "k.bin"), "--nvdisasm", "/bin/true"])
    assert rc == 2 and "bad magic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu_lines.main([str(tmp_path / "sass.csv"), str(tmp_path / "k.bin"), "--top", "0", "--nvdisasm", "x"])
