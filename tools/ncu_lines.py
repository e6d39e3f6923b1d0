#!/usr/bin/env python3
"""Where a kgen kernel's warps stall, by source line of kgen's templates.

ncu samples warp stalls per SASS instruction; kgen compiles its kernels with line information
(NVRTC --generate-line-info), and `nvdisasm -g` prints the template file and line of every
instruction of a cubin. This tool lines the two up by instruction offset and sums the samples
per line, with the main stall reasons of each.

On the GPU machine, profile and export the per-instruction page of one kernel:

    ncu --section SourceCounters --section WarpStateStats --kernel-name regex:attention_bwd_kv \\
        --launch-skip 3 --launch-count 1 -o rep kgen bench --op attention_bwd ...
    ncu --import rep.ncu-rep --page source --csv --print-source sass > sass.csv

Then, anywhere (no GPU), with the same kernel's cubin or its kgen cache entry (`kgen cache ls`
names the entries; the file is <cache dir>/v1/<first two hex digits>/<key>.kgen) and an
nvdisasm (CUDA toolkit, or PyPI's nvidia-cuda-nvdisasm wheel):

    python3 tools/ncu_lines.py sass.csv <entry.kgen or kernel.cubin> --templates templates

With --count instructions it sums the executed (warp-level) instructions per line instead, with
each line's commonest opcodes: where a kernel issues more instructions than it needs.
"""
from __future__ import annotations

import argparse
import collections
import csv
import hashlib
import io
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ENTRY_MAGIC = b"KGEN\x01"
SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def cubin_of(data: bytes) -> bytes:
    """The binary inside a kgen cache entry (format of cache/binary_cache.h, checksum checked), or
    `data` itself when it is already an ELF file."""
    if data.startswith(b"\x7fELF"):
        return data
    if not data.startswith(ENTRY_MAGIC):
        raise ValueError("neither an ELF cubin nor a kgen cache entry (bad magic)")
    pos = len(ENTRY_MAGIC)
    (version,) = struct.unpack_from("<I", data, pos)
    if version != 1:
        raise ValueError(f"kgen cache entry format version {version}, this tool reads 1")
    pos += 4
    parts = []
    for _ in range(3):  # key, metadata, binary
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        parts.append(data[pos:pos + n])
        pos += n
    if pos + 32 != len(data):
        raise ValueError("kgen cache entry lengths do not add up to the file size")
    if hashlib.sha256(data[:pos]).digest() != data[pos:]:
        raise ValueError("kgen cache entry checksum mismatch")
    return parts[2]


_FILE_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_SECTION = re.compile(r"^\.text\.(\S+):\s*$")


def mnemonic(instruction: str) -> str:
    """The opcode of a SASS instruction, without its predicate (`@!P0 BRA …` -> `BRA`)."""
    words = [w for w in instruction.split() if not w.startswith("@")]
    return words[0] if words else ""


def lines_by_offset(disassembly: str, function: str) -> dict[int, tuple[str, int, str]]:
    """Offset of each instruction of `function` in `nvdisasm -g` output -> (file, line, opcode),
    the file from kgen_device/ on when the path has it."""
    out: dict[int, tuple[str, int, str]] = {}
    inside = False
    where: tuple[str, int] = ("?", 0)
    for text in disassembly.splitlines():
        section = _SECTION.match(text.strip())
        if section:
            inside = section.group(1) == function
            continue
        if not inside:
            continue
        found = _FILE_LINE.search(text)
        if found:
            path = found.group(1)
            cut = path.find("kgen_device/")
            where = (path[cut:] if cut >= 0 else path, int(found.group(2)))
            continue
        instruction = _INSTRUCTION.search(text)
        if instruction:
            out[int(instruction.group(1), 16)] = (*where, mnemonic(instruction.group(2)))
    return out


@dataclass
class Sass:
    kernel: str
    # (offset from the first instruction, SASS text, samples, {reason: samples})
    rows: list[tuple[int, str, int, dict[str, int]]] = field(default_factory=list)
    # warp-level instructions executed per offset (empty when the export has no such column)
    executed: dict[int, int] = field(default_factory=dict)


def read_sass_csv(text: str) -> Sass:
    """ncu's `--page source --csv --print-source sass` export of one kernel."""
    table = list(csv.reader(io.StringIO(text)))
    if len(table) < 3 or not table[0] or table[0][0] != "Kernel Name":
        raise ValueError("not an ncu source-page CSV (first row must be Kernel Name)")
    header = table[1]
    col = {name: i for i, name in enumerate(header)}
    for needed in ("Address", "Source", SAMPLES):
        if needed not in col:
            raise ValueError(f"the CSV has no '{needed}' column (export with --print-source sass)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    sass = Sass(kernel=table[0][1])
    first = None
    for row in table[2:]:
        if len(row) < len(header):
            continue
        address = int(row[col["Address"]], 16)
        first = address if first is None else first
        counts = {name: int(row[col[name]].replace(",", "") or 0) for name in (SAMPLES, *reasons)}
        sass.rows.append((address - first, row[col["Source"]].strip(), counts[SAMPLES],
                          {r[len("stall_"):]: counts[r] for r in reasons if counts[r]}))
        if EXECUTED in col:
            sass.executed[address - first] = int(row[col[EXECUTED]].replace(",", "") or 0)
    return sass


def by_line(sass: Sass, lines: dict[int, tuple[str, int, str]]):
    """Samples and stall reasons summed per (file, line), most sampled first, and the total.
    Every sampled instruction must be in the disassembly with the same opcode."""
    samples: collections.Counter = collections.Counter()
    reasons: dict = collections.defaultdict(collections.Counter)
    differ = [offset for offset, text, *_ in sass.rows
              if offset not in lines or lines[offset][2] != mnemonic(text)]
    if differ or len(lines) != len(sass.rows):
        where = f" (first at offset {differ[0]:#x})" if differ else ""
        raise ValueError(f"the disassembly ({len(lines)} instructions) does not match the profiled kernel "
                         f"({len(sass.rows)}; {len(differ)} differ{where}): not the profiled binary?")
    for offset, _, count, why in sass.rows:
        key = lines[offset][:2]
        samples[key] += count
        reasons[key].update(why)
    return samples.most_common(), reasons, sum(samples.values())


def executed_by_line(sass: Sass, lines: dict[int, tuple[str, int, str]]):
    """Executed instructions summed per (file, line), most first, with each line's count per
    opcode (without modifiers: IMAD.MOV.U32 counts as IMAD), and the total; the same checks as
    by_line, and the export must have the executed-instructions column."""
    by_line(sass, lines)  # the same binary?
    if not sass.executed:
        raise ValueError(f"the CSV has no '{EXECUTED}' column (profile with --section SourceCounters)")
    counts: collections.Counter = collections.Counter()
    opcodes: dict = collections.defaultdict(collections.Counter)
    for offset, n in sass.executed.items():
        key = lines[offset][:2]
        counts[key] += n
        opcodes[key][lines[offset][2].split(".")[0]] += n
    return counts.most_common(), opcodes, sum(counts.values())


def profile_lines(sass_csv: str, binary: str, nvdisasm: str, count: str = "samples"):
    """by_line (count "samples") or executed_by_line ("instructions") of the ncu export
    `sass_csv` against `nvdisasm -g` of `binary` (cubin or cache entry), and the export itself;
    OSError or ValueError says what went wrong."""
    with open(sass_csv, encoding="utf-8") as f:
        sass = read_sass_csv(f.read())
    with open(binary, "rb") as f:
        cubin = cubin_of(f.read())
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        disassembly = subprocess.run([nvdisasm, "-g", "-c", f.name], capture_output=True, check=False)
    if disassembly.returncode != 0:
        raise ValueError(f"nvdisasm failed: {disassembly.stderr.decode(errors='replace').strip()}")
    lines = lines_by_offset(disassembly.stdout.decode(), sass.kernel)
    return (*(executed_by_line if count == "instructions" else by_line)(sass, lines), sass)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog=__doc__.split("\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sass_csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("binary", help="the kernel's cubin, or its kgen cache entry (.kgen)")
    parser.add_argument("--nvdisasm", default=shutil.which("nvdisasm"),
                        help="nvdisasm executable (default: the one on PATH)")
    parser.add_argument("--top", type=int, default=25, help="lines to print (default 25)")
    parser.add_argument("--templates", help="kgen's templates/ directory: print each line's text")
    parser.add_argument("--count", choices=("samples", "instructions"), default="samples",
                        help="what to sum per line: warp stall samples with their main reasons (default), "
                             "or executed instructions with their main opcodes")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    if not args.nvdisasm:
        parser.error("no nvdisasm on PATH: pass --nvdisasm")
    try:
        ranked, reasons, total, sass = profile_lines(args.sass_csv, args.binary, args.nvdisasm, args.count)
    except (OSError, ValueError) as e:
        print(f"ncu_lines: {e}", file=sys.stderr)
        return 2
    what = "warp samples" if args.count == "samples" else "instructions executed (warp-level)"
    print(f"{sass.kernel}: {len(sass.rows)} instructions, {total} {what}")
    sources: dict[str, list[str]] = {}
    for (path, line), count in ranked[:args.top]:
        main_reasons = ", ".join(f"{r} {n}" for r, n in reasons[(path, line)].most_common(3))
        executed = f"{count:>12}  " if args.count == "instructions" else ""
        print(f"{100 * count / max(total, 1):5.1f} %  {executed}{path}:{line}  ({main_reasons})")
        if args.templates:
            if path not in sources:
                try:
                    with open(f"{args.templates}/{path}", encoding="utf-8") as f:
                        sources[path] = f.read().splitlines()
                except OSError:
                    sources[path] = []
            if 0 < line <= len(sources[path]):
                print(f"         {sources[path][line - 1].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
