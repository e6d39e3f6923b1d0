"""Disassembly of an AMD code object into instructions with parsed operands.

The instruction text comes from `llvm-objdump -d --mcpu=<gfx>`; each line carries the mnemonic,
the operands in LLVM's AMDGPU assembler syntax, and (in the trailing comment) the address and the
encoding words. This module turns a line into an `Instruction`: the opcode, a list of `Operand`s
and a dict of modifiers (`offset:16`, `op_sel_hi:[0,1]`, `dst_sel:WORD_1`, bare flags such as
`off` or `sc0`).
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field

OBJDUMP_CANDIDATES = ("llvm-objdump-22", "llvm-objdump")

# Special scalar registers by name: their index in the scalar operand space (the encoding's
# SSRC numbers), so that the emulator keeps them in one array with the SGPRs.
SPECIAL_SREGS = {
    "vcc_lo": 106, "vcc_hi": 107, "vcc": 106,
    "m0": 124, "exec_lo": 126, "exec_hi": 127, "exec": 126,
    "flat_scratch_lo": 102, "flat_scratch_hi": 103, "flat_scratch": 102,
}

# Inline floating-point constants (ISA "Scalar ALU and vector ALU operands": inline constants
# 240-248) as the disassembler prints them.
INLINE_FLOATS = {"0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0", "0.15915494"}


def find_objdump() -> str | None:
    for name in OBJDUMP_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Operand:
    kind: str                 # 'v' (VGPR), 'a' (AGPR), 's' (scalar incl. specials), 'imm', 'float', 'scc', 'off'
    index: int = 0            # first register, or the integer value of an immediate
    count: int = 1            # registers (v[4:7] -> 4)
    text: str = ""            # as printed ('1.0' for inline floats, the literal's digits)
    neg: bool = False
    abs: bool = False
    sext: bool = False        # SDWA sext()
    literal: bool = False     # a 32-bit literal (not an inline constant)

    def __repr__(self) -> str:
        return self.text


@dataclass
class Instruction:
    addr: int
    size: int
    opcode: str
    operands: list[Operand]
    mods: dict = field(default_factory=dict)
    text: str = ""

    def __repr__(self) -> str:
        return f"{self.addr:#x}: {self.text}"


_REG = re.compile(r"^([vsa])(?:(\d+)|\[(\d+):(\d+)\])$")
_MOD = re.compile(r"(?<![\w\[])([a-z_][a-z0-9_]*):(\[[^\]]*\]|[^\s,]+)")
_BARE_FLAGS = {"sc0", "sc1", "nt", "glc", "slc", "dlc", "lds", "clamp", "gds", "off"}


def parse_operand(tok: str) -> Operand:
    text = tok
    neg = abs_ = sext = False
    if tok.startswith("sext(") and tok.endswith(")"):
        sext, tok = True, tok[5:-1]
    if tok.startswith("neg(") and tok.endswith(")"):
        neg, tok = True, tok[4:-1]
    if tok.startswith("-") and not re.match(r"^-\d|^-0x", tok):
        neg, tok = True, tok[1:]
    if (tok.startswith("|") and tok.endswith("|")) or (tok.startswith("abs(") and tok.endswith(")")):
        abs_, tok = True, (tok[1:-1] if tok.startswith("|") else tok[4:-1])
    m = _REG.match(tok)
    if m:
        kind = m.group(1)
        if m.group(2) is not None:
            first, last = int(m.group(2)), int(m.group(2))
        else:
            first, last = int(m.group(3)), int(m.group(4))
        return Operand(kind, first, last - first + 1, text, neg, abs_, sext)
    if tok in SPECIAL_SREGS:
        count = 2 if tok in ("vcc", "exec", "flat_scratch") else 1
        return Operand("s", SPECIAL_SREGS[tok], count, text, neg, abs_, sext)
    if tok == "scc":
        return Operand("scc", 0, 1, text)
    if tok == "off":
        return Operand("off", 0, 0, text)
    if tok in INLINE_FLOATS:
        return Operand("float", 0, 1, tok, neg, abs_, sext)
    if re.match(r"^-?(0x[0-9a-fA-F]+|\d+)$", tok):
        value = int(tok, 0)
        literal = tok.startswith("0x") or not (-16 <= value <= 64)
        return Operand("imm", value, 1, text, neg, abs_, sext, literal)
    raise ValueError(f"cannot parse operand {text!r}")


def parse_line(line: str) -> Instruction | None:
    """One disassembly line ('\\tv_add_f32_e32 v1, v2, v3   // 0000001600: 02020503') or None."""
    if not line.startswith("\t") or "//" not in line:
        return None
    body, comment = line.split("//", 1)
    body = body.strip()
    cm = re.match(r"\s*([0-9A-Fa-f]+):((?:\s+[0-9A-Fa-f]{8})+)", comment)
    if not cm or not body:
        return None
    addr = int(cm.group(1), 16)
    size = 4 * len(cm.group(2).split())
    parts = body.split(None, 1)
    opcode = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    mods: dict = {}
    if opcode == "s_waitcnt":  # counters only; execution is in order
        return Instruction(addr, size, opcode, [], {}, body)
    for m in _MOD.finditer(rest):
        mods[m.group(1)] = m.group(2)
    rest = _MOD.sub("", rest)
    operands: list[Operand] = []
    for chunk in [c.strip() for c in rest.split(",")]:
        if not chunk:
            continue
        words = chunk.split()
        operands.append(parse_operand(words[0]))
        for w in words[1:]:
            if w in _BARE_FLAGS or re.match(r"^\w+$", w):
                mods[w] = True
            else:
                raise ValueError(f"cannot parse {line.strip()!r}: stray {w!r}")
    return Instruction(addr, size, opcode, operands, mods, body)


def disassemble(code_object_path: str, mcpu: str) -> dict[str, list[Instruction]]:
    """Runs llvm-objdump on the code object; returns each function's instructions by symbol."""
    objdump = find_objdump()
    if objdump is None:
        raise RuntimeError("llvm-objdump-22 is not installed")
    out = subprocess.run([objdump, "-d", f"--mcpu={mcpu}", code_object_path], check=True,
                         capture_output=True, text=True).stdout
    funcs: dict[str, list[Instruction]] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-fA-F]+ <([^>]+)>:$", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        ins = parse_line(line)
        if ins is not None and current is not None:
            current.append(ins)
    return funcs


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]
