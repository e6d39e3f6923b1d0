"""A functional emulator of the CDNA (gfx90a / gfx942 / gfx950) wave64 ISA for kgen's kernels.

Execution model: a dispatch runs workgroup by workgroup; the waves of a workgroup run in turn,
each until it reaches `s_barrier` or `s_endpgm`, and a barrier releases when every wave that has
not ended has reached it. Instructions execute in program order and complete at once, so
`s_waitcnt` and `s_nop` do nothing. Each instruction is compiled once into a Python closure over
numpy arrays of 64 lanes. An instruction without semantics here fails the load, naming it: the
emulator never skips one.

Semantics follow the AMD Instinct MI300 (CDNA3) Instruction Set Architecture reference guide
(sections named in README.md); the MFMA operand and result layouts come from tables produced by
AMD's matrix instruction calculator (mfma_tables/).
"""
from __future__ import annotations

import csv
import os
import re

import numpy as np

from disasm import Instruction, Operand, f32_bits

np.seterr(all="ignore")
LANES = 64
U32 = np.uint32
U64 = np.uint64
F32 = np.float32
MASK32 = 0xFFFFFFFF
EXEC, VCC, M0 = 126, 106, 124
ALL = np.ones(LANES, bool)
LANE_IDS = np.arange(LANES, dtype=U32)


class EmulatorError(RuntimeError):
    pass


class Unsupported(EmulatorError):
    pass


def f32(x):
    return x.view(F32)


def bits(x):
    return np.asarray(x, F32).view(U32)


def bf16_to_f32(h):
    return (h.astype(U32) << 16).view(F32)


def f16_to_f32(h):
    return h.astype(np.uint16).view(np.float16).astype(F32)


def fma32(a, b, c):
    # float64 holds the exact product of two floats; the sum is rounded twice (to f64, then f32),
    # which can differ from a fused f32 FMA in the last bit in rare ties (README: limits).
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


# ---------------------------------------------------------------- memory
class Memory:
    """Global memory: one byte array at a high base address (above 4 GiB, so that an address
    truncated to 32 bits cannot hit it)."""

    BASE = 0x1_0000_0000

    def __init__(self, size: int = 1 << 24):
        self.buf = np.zeros(size, np.uint8)
        self.top = 0

    def alloc(self, nbytes: int, align: int = 256) -> int:
        self.top = (self.top + align - 1) // align * align
        addr = self.BASE + self.top
        self.top += max(nbytes, 1)
        if self.top > self.buf.size:
            new = np.zeros(max(self.buf.size * 2, self.top + (1 << 20)), np.uint8)
            new[: self.buf.size] = self.buf
            self.buf = new
        return addr

    def put(self, addr: int, data: bytes | np.ndarray):
        b = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).ravel()
        o = addr - self.BASE
        self.buf[o:o + b.size] = b

    def get(self, addr: int, nbytes: int) -> np.ndarray:
        o = addr - self.BASE
        return self.buf[o:o + nbytes].copy()

    def _index(self, addr: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        o = addr.astype(np.int64) - self.BASE
        if o.size and (o.min() < 0 or o.max() + nbytes > self.top):
            bad = int(addr[(o < 0) | (o + nbytes > self.top)][0])
            raise EmulatorError(f"{what}: address {bad:#x} outside the allocated buffers")
        return o[:, None] + np.arange(nbytes)

    def load(self, addr, nbytes, what="global load"):
        return self.buf[self._index(addr, nbytes, what)]

    def store(self, addr, data_u8, what="global store"):
        self.buf[self._index(addr, data_u8.shape[1], what)] = data_u8


# ---------------------------------------------------------------- MFMA layouts
TABLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mfma_tables")
_CELL = re.compile(r"([ABD])\[(\d+)\]\[(\d+)\]")


def load_layout(name: str, matrix: str):
    """Lane/register position of every matrix entry, from the calculator's CSV: returns
    (rows, cols) arrays reg[r, c], lane[r, c], half[r, c] (half: 16-bit half of the register)."""
    path = os.path.join(TABLE_DIR, f"{name}_{matrix}.csv")
    with open(path) as f:
        lines = [l for l in f if l.strip() and not l.startswith(("Architecture", "Instruction"))]
    rows = list(csv.reader(lines))
    header, body = rows[0], rows[1:]
    cells = {}
    for r in body:
        lane = int(r[0])
        for col, text in zip(header[1:], r[1:]):
            m = re.match(r"v(\d+)(?:\.\[(\d+):\d+\])?", col)
            reg, low_bit = int(m.group(1)), int(m.group(2) or 0)
            c = _CELL.fullmatch(text)
            cells[(int(c.group(2)), int(c.group(3)))] = (reg, lane, low_bit // 16)
    nr = 1 + max(k[0] for k in cells)
    nc = 1 + max(k[1] for k in cells)
    reg = np.zeros((nr, nc), int)
    lane = np.zeros((nr, nc), int)
    half = np.zeros((nr, nc), int)
    for (i, j), (g, l, h) in cells.items():
        reg[i, j], lane[i, j], half[i, j] = g, l, h
    if len(cells) != nr * nc:
        raise EmulatorError(f"{path}: {len(cells)} entries for a {nr}x{nc} matrix")
    return reg, lane, half


class MfmaShape:
    def __init__(self, table: str, in_type: str):
        self.a = load_layout(table, "A")  # (32, K)
        self.b = load_layout(table, "B")  # (K, 32)
        self.d = load_layout(table, "D")  # (32, 32)
        self.in_type = in_type
        self.a_regs = 1 + int(self.a[0].max())
        self.b_regs = 1 + int(self.b[0].max())
        self.d_regs = 1 + int(self.d[0].max())


# Mnemonic -> calculator table. llvm-objdump names the instructions by the --mcpu it decodes for:
# gfx90a (CDNA2) spells them 32x32x8f16 and 32x32x8bf16_1k, gfx94x (CDNA3) 32x32x8_f16 and _bf16.
MFMA_TABLES = {
    "v_mfma_f32_32x32x8_f16": ("cdna3_v_mfma_f32_32x32x8_f16", "f16"),
    "v_mfma_f32_32x32x8_bf16": ("cdna3_v_mfma_f32_32x32x8_bf16", "bf16"),
    "v_mfma_f32_32x32x8f16": ("cdna2_v_mfma_f32_32x32x8f16", "f16"),
    "v_mfma_f32_32x32x8bf16_1k": ("cdna2_v_mfma_f32_32x32x8bf16_1k", "bf16"),
}
_mfma_cache: dict[str, MfmaShape] = {}


def mfma_shape(op: str) -> MfmaShape:
    if op not in _mfma_cache:
        table, t = MFMA_TABLES[op]
        _mfma_cache[op] = MfmaShape(table, t)
    return _mfma_cache[op]


# ---------------------------------------------------------------- wave state
class Wave:
    def __init__(self, wg, wave_id: int):
        self.s = np.zeros(128, U32)
        self.scc = 0
        self.v = np.zeros((512, LANES), U32)  # v0..v255, then a0..a255 at 256..511
        self.pc = 0
        self.state = "run"  # run | barrier | done
        self.wg = wg
        self.wave_id = wave_id
        self.executed = 0

    def exec_mask(self) -> np.ndarray:
        e = int(self.s[EXEC]) | int(self.s[EXEC + 1]) << 32
        m = _MASKS.get(e)
        if m is None:
            m = _MASKS[e] = np.array([(e >> i) & 1 for i in range(LANES)], bool)
        return m

    def get_s64(self, i: int) -> int:
        return int(self.s[i]) | int(self.s[i + 1]) << 32

    def set_s64(self, i: int, x: int):
        self.s[i] = x & MASK32
        self.s[i + 1] = (x >> 32) & MASK32


_MASKS: dict[int, np.ndarray] = {}


def mask_to_int(m: np.ndarray) -> int:
    return int(np.packbits(m, bitorder="little").view(U64)[0])


# What VGPRs, AGPRs and LDS hold before a kernel writes them, with Dispatch.poison: all ones, a NaN
# in fp32, fp16 and bf16 alike (on hardware their contents are undefined).
POISON_BYTE = 0xFF


class Workgroup:
    def __init__(self, lds_bytes: int, poison: bool = False):
        self.lds = np.full(max(lds_bytes, 4), POISON_BYTE if poison else 0, np.uint8)
        self.lds_size = lds_bytes

    def lds_index(self, addr: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        a = addr.astype(np.int64)
        if a.size and (a.min() < 0 or a.max() + nbytes > self.lds_size):
            bad = int(a[(a < 0) | (a + nbytes > self.lds_size)][0])
            raise EmulatorError(f"{what}: LDS address {bad:#x} outside the {self.lds_size} bytes of LDS")
        return a[:, None] + np.arange(nbytes)


# ---------------------------------------------------------------- operand access
def const_value(op: Operand, width: int) -> int:
    """An immediate or inline constant as `width` bits (ISA "Scalar and vector operands")."""
    if op.kind == "float":
        x = float(op.text)
        if width == 64:
            import struct
            return struct.unpack("<Q", struct.pack("<d", x))[0]
        if width == 16:
            return int(np.float16(x).view(np.uint16))
        return f32_bits(x)
    v = op.index
    if width == 64:
        if op.literal and v & 0x80000000:
            raise Unsupported(f"a 32-bit literal {op.text} with bit 31 set in a 64-bit operand")
        return v & 0xFFFFFFFFFFFFFFFF
    return v & MASK32


def apply_mods(x: np.ndarray, op: Operand) -> np.ndarray:
    if op.abs:
        x = x & U32(0x7FFFFFFF)
    if op.neg:
        x = x ^ U32(0x80000000)
    return x


def reader32(op: Operand):
    """A closure returning the operand as 64 lanes of uint32 (input modifiers applied)."""
    if op.kind in ("v", "a"):
        i = op.index + (256 if op.kind == "a" else 0)
        if op.abs or op.neg:
            return lambda w: apply_mods(w.v[i], op)
        return lambda w: w.v[i]
    if op.kind == "s":
        i = op.index
        if op.abs or op.neg:
            return lambda w: apply_mods(np.full(LANES, w.s[i], U32), op)
        return lambda w: np.full(LANES, w.s[i], U32)
    if op.kind in ("imm", "float"):
        c = apply_mods(np.full(LANES, const_value(op, 32), U32), op)
        c.setflags(write=False)
        return lambda w: c
    raise Unsupported(f"operand {op.text} as a 32-bit vector source")


def reader64(op: Operand):
    if op.kind in ("v", "a"):
        i = op.index + (256 if op.kind == "a" else 0)
        if op.abs or op.neg:
            raise Unsupported("64-bit source modifiers")
        return lambda w: w.v[i].astype(U64) | (w.v[i + 1].astype(U64) << U64(32))
    if op.kind == "s":
        i = op.index
        return lambda w: np.full(LANES, w.get_s64(i), U64)
    if op.kind in ("imm", "float"):
        c = np.full(LANES, const_value(op, 64), U64)
        return lambda w: c
    raise Unsupported(f"operand {op.text} as a 64-bit vector source")


def vdst_index(op: Operand) -> int:
    if op.kind not in ("v", "a"):
        raise Unsupported(f"vector destination {op.text}")
    return op.index + (256 if op.kind == "a" else 0)


def write_v32(w: Wave, i: int, val: np.ndarray, mask: np.ndarray):
    np.copyto(w.v[i], val.astype(U32, copy=False), where=mask)


def write_v64(w: Wave, i: int, val: np.ndarray, mask: np.ndarray):
    np.copyto(w.v[i], (val & U64(MASK32)).astype(U32), where=mask)
    np.copyto(w.v[i + 1], (val >> U64(32)).astype(U32), where=mask)


def sreader(op: Operand, width: int):
    """A closure returning a scalar operand as a Python int of `width` bits."""
    if op.kind == "s":
        i = op.index
        if width == 64:
            return lambda w: w.get_s64(i)
        return lambda w: int(w.s[i])
    if op.kind in ("imm", "float"):
        c = const_value(op, width)
        return lambda w: c
    if op.kind == "scc":
        return lambda w: w.scc
    raise Unsupported(f"scalar operand {op.text}")


def swriter(op: Operand, width: int):
    if op.kind != "s":
        raise Unsupported(f"scalar destination {op.text}")
    i = op.index
    if width == 64:
        return lambda w, x: w.set_s64(i, x)

    def wr(w, x):
        w.s[i] = x & MASK32
    return wr


def sx32(x: int) -> int:
    x &= MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def sx64(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


# ---------------------------------------------------------------- SALU (ISA: "Scalar ALU Operations", SOP1/SOP2/SOPC/SOPK)
def _bool(x) -> int:
    return 1 if x else 0


def _salu(fn, widths, width, sets_scc):
    """SALU op over sources of `widths` bits: fn(*sources, scc) -> (result, scc or None). SCC is
    fn's when it returns one, else result != 0 where sets_scc, else unchanged."""
    def compile_(ins: Instruction):
        d = swriter(ins.operands[0], width)
        srcs = [sreader(op, wd) for op, wd in zip(ins.operands[1:], widths)]
        m = (1 << width) - 1

        def run(w):
            r, c = fn(*[x(w) for x in srcs], w.scc)
            r &= m
            d(w, r)
            if c is not None:
                w.scc = c
            elif sets_scc:
                w.scc = _bool(r)
        return run
    return compile_


def _salu2(fn, width=32, sets_scc="nz"):
    """Two sources: fn(a, b, scc) -> (result, scc or None); a 64-bit shift's amount is 32 bits."""
    return _salu(fn, (width, 32 if width == 64 and sets_scc == "shift" else width), width,
                 sets_scc in ("nz", "shift"))


def _salu1(fn, width=32, swidth=None, sets_scc=True):
    return _salu(lambda a, c: (fn(a), None), (swidth or width,), width, sets_scc)


def _scmp(fn, width=32, signed=False, k=False):
    def compile_(ins: Instruction):
        a = sreader(ins.operands[0], width)
        if k:
            v = ins.operands[1].index & 0xFFFF
            if signed and v & 0x8000:
                v -= 0x10000
            b = lambda w: v
        else:
            b = sreader(ins.operands[1], width)
        conv = (sx64 if width == 64 else sx32) if signed else (lambda x: x)

        def run(w):
            w.scc = _bool(fn(conv(a(w)), conv(b(w))))
        return run
    return compile_


def _saveexec(fn):
    def compile_(ins: Instruction):
        d = swriter(ins.operands[0], 64)
        a = sreader(ins.operands[1], 64)

        def run(w):
            old = w.get_s64(EXEC)
            new = fn(a(w), old) & ((1 << 64) - 1)
            d(w, old)
            w.set_s64(EXEC, new)
            w.scc = _bool(new)
        return run
    return compile_


def _add_sc(a, b, c):
    r = a + b
    return r, r >> 32


def _addc(a, b, c):
    r = a + b + c
    return r, r >> 32


def _sub_u(a, b, c):
    return a - b, _bool(b > a)


def _subb_u(a, b, c):
    return a - b - c, _bool(b + c > a)


def _add_i(a, b, c):
    r = sx32(a) + sx32(b)
    return r, _bool(r != sx32(r))


def _sub_i(a, b, c):
    r = sx32(a) - sx32(b)
    return r, _bool(r != sx32(r))


def _lshl_add(n):
    def f(a, b, c):
        r = ((a << n) & MASK32) + b
        return r, r >> 32
    return f


def _bfe(signed, width=32):
    def f(a, b, c):
        off, size = b & (width - 1), (b >> 16) & 0x7F
        r = (a >> off) & ((1 << size) - 1) if size else 0
        if signed and size and r >> (size - 1) & 1:
            r -= 1 << size
        return r, None
    return f


def _ff1(x, width):
    if x == 0:
        return MASK32
    return (x & -x).bit_length() - 1


SALU = {
    "s_add_u32": _salu2(_add_sc, sets_scc="c"),
    "s_addc_u32": _salu2(_addc, sets_scc="c"),
    "s_sub_u32": _salu2(_sub_u, sets_scc="c"),
    "s_subb_u32": _salu2(_subb_u, sets_scc="c"),
    "s_add_i32": _salu2(_add_i, sets_scc="c"),
    "s_sub_i32": _salu2(_sub_i, sets_scc="c"),
    "s_mul_i32": _salu2(lambda a, b, c: (sx32(a) * sx32(b), c), sets_scc="keep"),
    "s_mul_hi_u32": _salu2(lambda a, b, c: ((a * b) >> 32, c), sets_scc="keep"),
    "s_mul_hi_i32": _salu2(lambda a, b, c: ((sx32(a) * sx32(b)) >> 32, c), sets_scc="keep"),
    "s_min_i32": _salu2(lambda a, b, c: (a if sx32(a) < sx32(b) else b, _bool(sx32(a) < sx32(b))), sets_scc="c"),
    "s_max_i32": _salu2(lambda a, b, c: (a if sx32(a) > sx32(b) else b, _bool(sx32(a) > sx32(b))), sets_scc="c"),
    "s_min_u32": _salu2(lambda a, b, c: (min(a, b), _bool(a < b)), sets_scc="c"),
    "s_max_u32": _salu2(lambda a, b, c: (max(a, b), _bool(a > b)), sets_scc="c"),
    "s_cselect_b32": _salu2(lambda a, b, c: (a if c else b, c), sets_scc="c"),
    "s_cselect_b64": _salu2(lambda a, b, c: (a if c else b, c), width=64, sets_scc="c"),
    "s_bfe_u32": _salu2(_bfe(False), sets_scc="nz"),
    "s_bfe_i32": _salu2(_bfe(True), sets_scc="nz"),
    "s_pack_ll_b32_b16": _salu2(lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF) << 16, c), sets_scc="c"),
    "s_pack_lh_b32_b16": _salu2(lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), c), sets_scc="c"),
    "s_pack_hh_b32_b16": _salu2(lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), c), sets_scc="c"),
    "s_abs_i32": _salu1(lambda a: abs(sx32(a))),
    "s_mov_b32": _salu1(lambda a: a, sets_scc=False),
    "s_mov_b64": _salu1(lambda a: a, width=64, sets_scc=False),
    "s_not_b32": _salu1(lambda a: ~a),
    "s_not_b64": _salu1(lambda a: ~a, width=64),
    "s_brev_b32": _salu1(lambda a: int(f"{a:032b}"[::-1], 2), sets_scc=False),
    "s_bcnt1_i32_b32": _salu1(lambda a: bin(a).count("1")),
    "s_bcnt1_i32_b64": _salu1(lambda a: bin(a).count("1"), swidth=64),
    "s_ff1_i32_b32": _salu1(lambda a: _ff1(a, 32), sets_scc=False),
    "s_ff1_i32_b64": _salu1(lambda a: _ff1(a, 64), swidth=64, sets_scc=False),
    "s_sext_i32_i8": _salu1(lambda a: sx32((a & 0xFF) | (0xFFFFFF00 if a & 0x80 else 0)), sets_scc=False),
    "s_sext_i32_i16": _salu1(lambda a: sx32((a & 0xFFFF) | (0xFFFF0000 if a & 0x8000 else 0)), sets_scc=False),
}
for _n in (1, 2, 3, 4):
    SALU[f"s_lshl{_n}_add_u32"] = _salu2(_lshl_add(_n), sets_scc="c")
for _w in (32, 64):
    _b = f"b{_w}"
    SALU[f"s_and_{_b}"] = _salu2(lambda a, b, c: (a & b, None), width=_w)
    SALU[f"s_or_{_b}"] = _salu2(lambda a, b, c: (a | b, None), width=_w)
    SALU[f"s_xor_{_b}"] = _salu2(lambda a, b, c: (a ^ b, None), width=_w)
    SALU[f"s_andn2_{_b}"] = _salu2(lambda a, b, c: (a & ~b, None), width=_w)
    SALU[f"s_orn2_{_b}"] = _salu2(lambda a, b, c: (a | ~b, None), width=_w)
    SALU[f"s_nand_{_b}"] = _salu2(lambda a, b, c: (~(a & b), None), width=_w)
    SALU[f"s_nor_{_b}"] = _salu2(lambda a, b, c: (~(a | b), None), width=_w)
    SALU[f"s_xnor_{_b}"] = _salu2(lambda a, b, c: (~(a ^ b), None), width=_w)
    SALU[f"s_lshl_{_b}"] = _salu2(lambda a, b, c, _w=_w: (a << (b & (_w - 1)), None), width=_w, sets_scc="shift")
    SALU[f"s_lshr_{_b}"] = _salu2(lambda a, b, c, _w=_w: (a >> (b & (_w - 1)), None), width=_w, sets_scc="shift")
SALU["s_ashr_i32"] = _salu2(lambda a, b, c: (sx32(a) >> (b & 31), None))
SALU["s_ashr_i64"] = _salu2(lambda a, b, c: (sx64(a) >> (b & 63), None), width=64, sets_scc="shift")
SALU["s_bfe_u64"] = _salu2(_bfe(False, 64), width=64, sets_scc="shift")
_CMPS = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
         "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}
for _c, _f in _CMPS.items():
    for _t in ("i32", "u32"):
        SALU[f"s_cmp_{_c}_{_t}"] = _scmp(_f, signed=_t == "i32")
        SALU[f"s_cmpk_{_c}_{_t}"] = _scmp(_f, signed=_t == "i32", k=True)
    if _c in ("eq", "lg"):
        SALU[f"s_cmp_{_c}_u64"] = _scmp(_f, width=64)
SALU["s_and_saveexec_b64"] = _saveexec(lambda s, e: s & e)
SALU["s_or_saveexec_b64"] = _saveexec(lambda s, e: s | e)
SALU["s_xor_saveexec_b64"] = _saveexec(lambda s, e: s ^ e)
SALU["s_andn2_saveexec_b64"] = _saveexec(lambda s, e: s & ~e)
SALU["s_orn2_saveexec_b64"] = _saveexec(lambda s, e: s | ~e)
SALU["s_andn1_saveexec_b64"] = _saveexec(lambda s, e: ~s & e)


def _movk(ins: Instruction):
    d = swriter(ins.operands[0], 32)
    v = ins.operands[1].index & 0xFFFF
    v = v - 0x10000 if v & 0x8000 else v
    return lambda w: d(w, v)


SALU["s_movk_i32"] = _movk


def _addk(ins: Instruction):
    d = swriter(ins.operands[0], 32)
    a = sreader(ins.operands[0], 32)
    v = ins.operands[1].index & 0xFFFF
    v = v - 0x10000 if v & 0x8000 else v

    def run(w):
        r = sx32(a(w)) + v
        d(w, r)
        w.scc = _bool(r != sx32(r))
    return run


def _mulk(ins: Instruction):
    d = swriter(ins.operands[0], 32)
    a = sreader(ins.operands[0], 32)
    v = ins.operands[1].index & 0xFFFF
    v = v - 0x10000 if v & 0x8000 else v
    return lambda w: d(w, sx32(a(w)) * v)


SALU["s_addk_i32"] = _addk
SALU["s_mulk_i32"] = _mulk


# ---------------------------------------------------------------- program flow (ISA: "Program Flow Control")
class Program:
    """A kernel's instructions and the map from code address to instruction index."""

    def __init__(self, instructions: list[Instruction]):
        self.ins = instructions
        self.index = {ins.addr: i for i, ins in enumerate(instructions)}

    def target(self, addr: int, why: str) -> int:
        if addr not in self.index:
            raise EmulatorError(f"{why}: jump to {addr:#x}, which is not an instruction of the kernel")
        return self.index[addr]


def _branch(cond):
    def compile_(ins: Instruction, prog: Program):
        simm = ins.operands[0].index
        simm = simm - 0x10000 if simm & 0x8000 else simm
        tgt = prog.target(ins.addr + 4 + 4 * simm, ins.text)

        def run(w):
            if cond(w):
                w.pc = tgt
        return run
    return compile_


BRANCHES = {
    "s_branch": _branch(lambda w: True),
    "s_cbranch_scc0": _branch(lambda w: w.scc == 0),
    "s_cbranch_scc1": _branch(lambda w: w.scc == 1),
    "s_cbranch_vccz": _branch(lambda w: w.s[VCC] == 0 and w.s[VCC + 1] == 0),
    "s_cbranch_vccnz": _branch(lambda w: w.s[VCC] != 0 or w.s[VCC + 1] != 0),
    "s_cbranch_execz": _branch(lambda w: w.s[EXEC] == 0 and w.s[EXEC + 1] == 0),
    "s_cbranch_execnz": _branch(lambda w: w.s[EXEC] != 0 or w.s[EXEC + 1] != 0),
}


def _getpc(ins, prog):
    d = swriter(ins.operands[0], 64)
    nxt = ins.addr + ins.size
    return lambda w: d(w, nxt)


def _setpc(ins, prog):
    a = sreader(ins.operands[0], 64)

    def run(w):
        w.pc = prog.target(a(w), ins.text)
    return run


def _swappc(ins, prog):
    d = swriter(ins.operands[0], 64)
    a = sreader(ins.operands[1], 64)
    nxt = ins.addr + ins.size

    def run(w):
        t = a(w)
        d(w, nxt)
        w.pc = prog.target(t, ins.text)
    return run


def _endpgm(ins, prog):
    def run(w):
        w.state = "done"
    return run


def _barrier(ins, prog):
    def run(w):
        w.state = "barrier"
    return run


def _nop(ins, prog):
    return None


FLOW = dict(BRANCHES)
FLOW.update({"s_getpc_b64": _getpc, "s_setpc_b64": _setpc, "s_swappc_b64": _swappc,
             "s_endpgm": _endpgm, "s_barrier": _barrier, "s_waitcnt": _nop, "s_nop": _nop,
             "s_setprio": _nop, "s_sleep": _nop})


# ---------------------------------------------------------------- scalar memory (ISA: "Scalar Memory Operations")
def _smem_load(ndw):
    def compile_(ins: Instruction, mem_ref):
        dst = ins.operands[0]
        base = sreader(ins.operands[1], 64)
        off = sreader(ins.operands[2], 32) if len(ins.operands) > 2 else (lambda w: 0)
        i = dst.index

        def run(w):
            addr = base(w) + sx32(off(w))
            data = mem_ref.memory.load(np.array([addr], U64), 4 * ndw, "s_load").view(U32).ravel()
            w.s[i:i + ndw] = data
        return run
    return compile_


SMEM = {"s_load_dword": _smem_load(1), "s_load_dwordx2": _smem_load(2), "s_load_dwordx4": _smem_load(4),
        "s_load_dwordx8": _smem_load(8), "s_load_dwordx16": _smem_load(16)}


# ---------------------------------------------------------------- VALU (ISA: "Vector ALU Operations", VOP1/VOP2/VOP3/VOPC)
def _fl(fn):
    """A float op on uint32 bit patterns."""
    return lambda *xs: bits(fn(*[f32(x) for x in xs]))


def _u32(x):
    return x.astype(U32)


def _perm(s0, s1, sel):
    both = (s0.astype(U64) << U64(32)) | s1.astype(U64)
    out = np.zeros(LANES, U32)
    for byte in range(4):
        k = (sel >> U32(8 * byte)) & U32(0xFF)
        pick = ((both >> (U64(8) * (k & U32(7)).astype(U64))) & U64(0xFF)).astype(U32)
        # 8..11: the sign of bytes 1, 3, 5, 7 replicated; 12: 0x00; 13 and up: 0xFF
        sign_byte = ((both >> (U64(16) * (k & U32(3)).astype(U64) + U64(15))) & U64(1)).astype(U32) * U32(0xFF)
        b = np.where(k < 8, pick, np.where(k < 12, sign_byte, np.where(k == 12, U32(0), U32(0xFF))))
        out |= b << U32(8 * byte)
    return out


def _mbcnt_lo(s0, s1):
    below = np.where(LANE_IDS >= 32, U64(MASK32), (U64(1) << LANE_IDS.astype(U64)) - U64(1)).astype(U64)
    return _popcount(s0.astype(U64) & below) + s1


def _mbcnt_hi(s0, s1):
    below = np.where(LANE_IDS < 32, U64(0), (U64(1) << (LANE_IDS.astype(U64) - U64(32))) - U64(1))
    return _popcount(s0.astype(U64) & below) + s1


def _popcount(x):
    x = x.astype(U64)
    c = np.zeros(x.shape, U32)
    for _ in range(64):
        c += (x & U64(1)).astype(U32)
        x = x >> U64(1)
    return c


def _cvt_u32_f32(x):
    x = f32(x).astype(np.float64)
    x = np.where(np.isnan(x), 0, np.clip(np.trunc(x), 0, MASK32))
    return x.astype(np.uint64).astype(U32)


def _cvt_i32_f32(x):
    x = f32(x).astype(np.float64)
    x = np.where(np.isnan(x), 0, np.clip(np.trunc(x), -2**31, 2**31 - 1))
    return x.astype(np.int64).astype(U32)


def _bfe_u(x, off, size):
    off, size = off & U32(31), size & U32(31)
    return np.where(size == 0, U32(0), (x >> off) & ((U32(1) << size) - U32(1)))


def _bfe_i(x, off, size):
    off, size = off & U32(31), size & U32(31)
    r = _bfe_u(x, off, size).astype(np.int64)
    neg = (size > 0) & ((r >> np.maximum(size.astype(np.int64) - 1, 0)) & 1).astype(bool)
    return np.where(neg, r - (np.int64(1) << size.astype(np.int64)), r).astype(U32)


def _rcp(x):
    return F32(1.0) / x


def _fmax(a, b):
    return np.fmax(a, b)


def _fmin(a, b):
    return np.fmin(a, b)


def _mul_hi_u32(a, b):
    return ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32)


def _mul_hi_i32(a, b):
    return ((a.view(np.int32).astype(np.int64) * b.view(np.int32).astype(np.int64)) >> 32).astype(U32)


def _i24(x):
    """Bits 23:0 as a signed 24-bit integer, in uint32 lanes (two's complement)."""
    return ((x << U32(8)).view(np.int32) >> 8).view(U32)


def _bf16_round(x):
    """f32 -> bf16 bits, round to nearest even (NaN stays NaN)."""
    u = bits(x)
    r = (u + U32(0x7FFF) + ((u >> U32(16)) & U32(1))) >> U32(16)
    return np.where(np.isnan(x), (u >> U32(16)) | U32(0x40), r) & U32(0xFFFF)


VALU = {
    # name: (sources, fn over uint32 lanes)
    "v_mov_b32": (1, lambda a: a.copy()),
    "v_not_b32": (1, lambda a: ~a),
    "v_bfrev_b32": (1, lambda a: np.array([int(f"{int(x):032b}"[::-1], 2) for x in a], U32)),
    "v_add_u32": (2, lambda a, b: a + b),
    "v_sub_u32": (2, lambda a, b: a - b),
    "v_subrev_u32": (2, lambda a, b: b - a),
    "v_add3_u32": (3, lambda a, b, c: a + b + c),
    "v_and_b32": (2, lambda a, b: a & b),
    "v_or_b32": (2, lambda a, b: a | b),
    "v_xor_b32": (2, lambda a, b: a ^ b),
    "v_or3_b32": (3, lambda a, b, c: a | b | c),
    "v_xor3_b32": (3, lambda a, b, c: a ^ b ^ c),
    "v_and_or_b32": (3, lambda a, b, c: (a & b) | c),
    "v_lshlrev_b32": (2, lambda a, b: b << (a & U32(31))),
    "v_lshrrev_b32": (2, lambda a, b: b >> (a & U32(31))),
    "v_ashrrev_i32": (2, lambda a, b: (b.view(np.int32) >> (a & U32(31)).astype(np.int32)).view(U32)),
    "v_lshl_add_u32": (3, lambda a, b, c: (a << (b & U32(31))) + c),
    "v_add_lshl_u32": (3, lambda a, b, c: (a + b) << (c & U32(31))),
    "v_lshl_or_b32": (3, lambda a, b, c: (a << (b & U32(31))) | c),
    "v_alignbit_b32": (3, lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64)) >> (c & U32(31)).astype(U64)).astype(U32)),
    "v_bfe_u32": (3, _bfe_u),
    "v_bfe_i32": (3, _bfe_i),
    "v_bfi_b32": (3, lambda a, b, c: (a & b) | (~a & c)),
    "v_mul_lo_u32": (2, lambda a, b: (a.astype(U64) * b.astype(U64)).astype(U32)),
    "v_mul_hi_u32": (2, _mul_hi_u32),
    "v_mul_hi_i32": (2, _mul_hi_i32),
    "v_mul_u32_u24": (2, lambda a, b: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF))),
    "v_mad_u32_u24": (3, lambda a, b, c: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)) + c),
    "v_mul_i32_i24": (2, lambda a, b: _i24(a) * _i24(b)),
    "v_mad_i32_i24": (3, lambda a, b, c: _i24(a) * _i24(b) + c),
    # 16-bit integer ops on bits 15:0 of their (SDWA-selected) sources; on GFX9, CDNA included,
    # they write zeros to bits 31:16 (LLVM's GCNSubtarget::zeroesHigh16BitsOfDest).
    "v_add_u16": (2, lambda a, b: (a + b) & U32(0xFFFF)),
    "v_sub_u16": (2, lambda a, b: (a - b) & U32(0xFFFF)),
    "v_subrev_u16": (2, lambda a, b: (b - a) & U32(0xFFFF)),
    "v_mul_lo_u16": (2, lambda a, b: ((a & U32(0xFFFF)) * (b & U32(0xFFFF))) & U32(0xFFFF)),
    "v_lshlrev_b16": (2, lambda a, b: (b << (a & U32(15))) & U32(0xFFFF)),
    "v_lshrrev_b16": (2, lambda a, b: (b & U32(0xFFFF)) >> (a & U32(15))),
    "v_ashrrev_i16": (2, lambda a, b: ((b & U32(0xFFFF)).astype(np.uint16).view(np.int16)
                                      >> (a & U32(15)).astype(np.int16)).view(np.uint16).astype(U32)),
    "v_min_i32": (2, lambda a, b: np.minimum(a.view(np.int32), b.view(np.int32)).view(U32)),
    "v_max_i32": (2, lambda a, b: np.maximum(a.view(np.int32), b.view(np.int32)).view(U32)),
    "v_min_u32": (2, np.minimum),
    "v_max_u32": (2, np.maximum),
    # VOP3 three-operand forms: D = min/max(S0, S1, S2), signed or unsigned 32-bit.
    "v_min3_i32": (3, lambda a, b, c: np.minimum(np.minimum(a.view(np.int32), b.view(np.int32)), c.view(np.int32)).view(U32)),
    "v_max3_i32": (3, lambda a, b, c: np.maximum(np.maximum(a.view(np.int32), b.view(np.int32)), c.view(np.int32)).view(U32)),
    "v_min3_u32": (3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": (3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_perm_b32": (3, _perm),
    "v_mbcnt_lo_u32_b32": (2, _mbcnt_lo),
    "v_mbcnt_hi_u32_b32": (2, _mbcnt_hi),
    "v_cvt_f32_u32": (1, lambda a: bits(a.astype(F32))),
    "v_cvt_f32_i32": (1, lambda a: bits(a.view(np.int32).astype(F32))),
    "v_cvt_u32_f32": (1, _cvt_u32_f32),
    "v_cvt_i32_f32": (1, _cvt_i32_f32),
    "v_cvt_f32_f16": (1, lambda a: bits(f16_to_f32(a & U32(0xFFFF)))),
    "v_cvt_f16_f32": (1, lambda a: f32(a).astype(np.float16).view(np.uint16).astype(U32)),
    "v_cvt_pk_f16_f32": (2, lambda a, b: f32(a).astype(np.float16).view(np.uint16).astype(U32)
                         | (f32(b).astype(np.float16).view(np.uint16).astype(U32) << U32(16))),
    "v_cvt_pk_bf16_f32": (2, lambda a, b: _bf16_round(f32(a)) | (_bf16_round(f32(b)) << U32(16))),
    "v_add_f32": (2, _fl(lambda a, b: a + b)),
    "v_sub_f32": (2, _fl(lambda a, b: a - b)),
    "v_subrev_f32": (2, _fl(lambda a, b: b - a)),
    "v_mul_f32": (2, _fl(lambda a, b: a * b)),
    "v_fma_f32": (3, _fl(fma32)),
    "v_max_f32": (2, _fl(_fmax)),
    "v_min_f32": (2, _fl(_fmin)),
    "v_max3_f32": (3, _fl(lambda a, b, c: np.fmax(np.fmax(a, b), c))),
    "v_min3_f32": (3, _fl(lambda a, b, c: np.fmin(np.fmin(a, b), c))),
    "v_exp_f32": (1, _fl(np.exp2)),
    "v_log_f32": (1, _fl(np.log2)),
    "v_rcp_f32": (1, _fl(_rcp)),
    "v_rcp_iflag_f32": (1, _fl(_rcp)),
    "v_sqrt_f32": (1, _fl(np.sqrt)),
    "v_rsq_f32": (1, _fl(lambda a: F32(1.0) / np.sqrt(a))),
    "v_trunc_f32": (1, _fl(np.trunc)),
    "v_floor_f32": (1, _fl(np.floor)),
    "v_ldexp_f32": (2, lambda a, b: bits(np.ldexp(f32(a), b.view(np.int32)))),
}


def _dot2_acc(half_to_f32):
    """D = S0[15:0]·S1[15:0] + S0[31:16]·S1[31:16] + D, 16-bit sources (fp16 or bf16): the
    products are exact in float64, the sum rounded once to fp32 (README: limits)."""
    def fn(a, b, d):
        lo = half_to_f32(a & U32(0xFFFF)).astype(np.float64) * half_to_f32(b & U32(0xFFFF)).astype(np.float64)
        hi = half_to_f32(a >> U32(16)).astype(np.float64) * half_to_f32(b >> U32(16)).astype(np.float64)
        return bits((lo + hi + f32(d).astype(np.float64)).astype(F32))
    return fn


# VOP2 ops whose destination is also a source (D = S0 * S1 + D; the dot products D = S0 · S1 + D)
ACCUMULATE = {"v_fmac_f32": _fl(fma32), "v_mac_f32": _fl(fma32),
              "v_dot2c_f32_f16": _dot2_acc(f16_to_f32), "v_dot2c_f32_bf16": _dot2_acc(bf16_to_f32)}


def _bitop3(ins: Instruction):
    imm = int(ins.mods["bitop3"], 0)

    def fn(a, b, c):
        out = np.zeros(LANES, U32)
        for i in range(8):
            if imm >> i & 1:
                out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
        return out
    return fn


# ---- SDWA (ISA: "SDWA" sub-dword addressing)
_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
        "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def _sdwa_src(reader, sel: str, sext: bool):
    shift, width = _SEL[sel]
    if width == 32:
        return reader
    mask = U32((1 << width) - 1)

    def rd(w):
        x = (reader(w) >> U32(shift)) & mask
        if sext:
            x = np.where(x >> U32(width - 1), x | ~mask, x)
        return x
    return rd


def _sdwa_dst(ins: Instruction):
    sel = ins.mods.get("dst_sel", "DWORD")
    unused = ins.mods.get("dst_unused", "UNUSED_PAD")
    shift, width = _SEL[sel]
    if width == 32:
        return None
    if unused not in ("UNUSED_PAD", "UNUSED_PRESERVE"):
        raise Unsupported(f"dst_unused:{unused}")
    field = U32(((1 << width) - 1) << shift)

    def place(res, old):
        r = (res << U32(shift)) & field
        return r | (old & ~field) if unused == "UNUSED_PRESERVE" else r
    return place


def _split(opcode: str):
    for suf in ("_e32", "_e64", "_sdwa", "_dpp"):
        if opcode.endswith(suf):
            return opcode[: -len(suf)], suf[1:]
    return opcode, ""


def _src_readers(ins: Instruction, first: int, n: int, enc: str):
    rs = []
    for k in range(n):
        op = ins.operands[first + k]
        r = reader32(op)
        if enc == "sdwa":
            r = _sdwa_src(r, ins.mods.get(f"src{k}_sel", "DWORD"), op.sext)
        rs.append(r)
    return rs


def _valu_generic(ins: Instruction, base: str, enc: str):
    if base in VALU:
        n, fn = VALU[base]
    elif base == "v_bitop3_b32":
        n, fn = 3, _bitop3(ins)
    elif base in ACCUMULATE:
        n, acc = 2, ACCUMULATE[base]
        fn = None
    else:
        return None
    di = vdst_index(ins.operands[0])
    rs = _src_readers(ins, 1, n, enc)
    place = _sdwa_dst(ins) if enc == "sdwa" else None
    clamp = ins.mods.get("clamp")
    if clamp:
        raise Unsupported("clamp")
    if fn is None:
        def run(w):
            m = w.exec_mask()
            write_v32(w, di, acc(rs[0](w), rs[1](w), w.v[di]), m)
        return run
    if place is not None:
        def run(w):
            m = w.exec_mask()
            write_v32(w, di, place(fn(*[r(w) for r in rs]), w.v[di]), m)
        return run
    if n == 1:
        r0 = rs[0]
        return lambda w: write_v32(w, di, fn(r0(w)), w.exec_mask())
    if n == 2:
        r0, r1 = rs
        return lambda w: write_v32(w, di, fn(r0(w), r1(w)), w.exec_mask())
    r0, r1, r2 = rs
    return lambda w: write_v32(w, di, fn(r0(w), r1(w), r2(w)), w.exec_mask())


# ---- VOPC (ISA: "Vector compare operations"): the result's inactive lanes are 0
_FCMP = {"lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b),
         "ge": np.greater_equal, "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
         "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
         "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
         "nlt": lambda a, b: ~(a < b), "f": lambda a, b: np.zeros(a.shape, bool), "tru": lambda a, b: np.ones(a.shape, bool)}
_ICMP = {"lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal,
         "ge": np.greater_equal, "f": lambda a, b: np.zeros(a.shape, bool), "t": lambda a, b: np.ones(a.shape, bool)}


def _vcmp(ins: Instruction, base: str, enc: str):
    m = re.fullmatch(r"v_cmp(x?)_(\w+?)_([fiu])(32|64)", base)
    if not m:
        return None
    x, cond, t, width = m.groups()
    if enc == "sdwa" or (width == "64" and t == "f"):
        raise Unsupported(ins.opcode)
    wide = width == "64"
    if t == "f":
        cmp = _FCMP[cond]
        conv = f32
    else:
        cmp = _ICMP[cond]
        conv = (lambda a: a.view(np.int64 if wide else np.int32)) if t == "i" else (lambda a: a)
    if enc == "e32":
        dst, srcs = VCC, ins.operands[1:3] if ins.operands[0].text == "vcc" else ins.operands[0:2]
    else:
        if ins.operands[0].kind != "s":
            raise Unsupported(f"{ins.opcode} destination {ins.operands[0].text}")
        dst, srcs = ins.operands[0].index, ins.operands[1:3]
    r0, r1 = (reader64(srcs[0]), reader64(srcs[1])) if wide else (reader32(srcs[0]), reader32(srcs[1]))

    def run(w):
        em = w.exec_mask()
        res = cmp(conv(r0(w)), conv(r1(w))) & em
        v = mask_to_int(res)
        w.set_s64(dst, v)
        if x:
            w.set_s64(EXEC, v)
    return run


def _lane_mask_reader(op: Operand):
    r = sreader(op, 64)

    def rd(w):
        v = r(w)
        m = _MASKS.get(v)
        if m is None:
            m = _MASKS[v] = np.array([(v >> i) & 1 for i in range(LANES)], bool)
        return m
    return rd


def _vcndmask(ins: Instruction, base: str, enc: str):
    di = vdst_index(ins.operands[0])
    r0, r1 = _src_readers(ins, 1, 2, enc)
    sel = _lane_mask_reader(ins.operands[3])
    place = _sdwa_dst(ins) if enc == "sdwa" else None

    def run(w):
        res = np.where(sel(w), r1(w), r0(w))
        if place is not None:
            res = place(res, w.v[di])
        write_v32(w, di, res, w.exec_mask())
    return run


def _vcarry(kind: str):
    """v_add_co_u32 / v_sub_co_u32 / v_subrev_co_u32 (carry out) and v_addc / v_subb(rev) (carry in and out)."""
    def compile_(ins: Instruction, base: str, enc: str):
        di = vdst_index(ins.operands[0])
        cout = ins.operands[1].index
        r0, r1 = reader32(ins.operands[2]), reader32(ins.operands[3])
        cin = _lane_mask_reader(ins.operands[4]) if kind in ("addc", "subb", "subbrev") else None

        def run(w):
            em = w.exec_mask()
            a, b = r0(w).astype(np.int64), r1(w).astype(np.int64)
            c = cin(w).astype(np.int64) if cin else 0
            if kind in ("add", "addc"):
                r = a + b + c
                carry = r > MASK32
            elif kind in ("sub", "subb"):
                r = a - b - c
                carry = r < 0
            else:
                r = b - a - c
                carry = r < 0
            write_v32(w, di, (r & MASK32).astype(U32), em)
            w.set_s64(cout, mask_to_int(carry & em))
        return run
    return compile_


def _v64(fn, nsrc):
    def compile_(ins: Instruction, base: str, enc: str):
        di = vdst_index(ins.operands[0])
        rs = []
        for k, op in enumerate(ins.operands[1:1 + nsrc]):
            rs.append(reader64(op) if fn.wide[k] else reader32(op))

        def run(w):
            write_v64(w, di, fn(*[r(w) for r in rs]), w.exec_mask())
        return run
    return compile_


def _wide(*w):
    def deco(f):
        f.wide = w
        return f
    return deco


@_wide(True)
def _mov64(a):
    return a


@_wide(True, False, True)
def _lshl_add_u64(a, b, c):
    return (a << (b & U32(7)).astype(U64)) + c


@_wide(False, True)
def _lshlrev_b64(a, b):
    return b << (a & U32(63)).astype(U64)


@_wide(False, True)
def _lshrrev_b64(a, b):
    return b >> (a & U32(63)).astype(U64)


@_wide(False, True)
def _ashrrev_i64(a, b):
    return (b.view(np.int64) >> (a & U32(63)).astype(np.int64)).view(U64)


def _mad64(signed: bool):
    def compile_(ins: Instruction, base: str, enc: str):
        di = vdst_index(ins.operands[0])
        cout = ins.operands[1].index
        r0, r1, r2 = reader32(ins.operands[2]), reader32(ins.operands[3]), reader64(ins.operands[4])

        def run(w):
            em = w.exec_mask()
            if not signed:
                p = r0(w).astype(U64) * r1(w).astype(U64)
                res = p + r2(w)
                write_v64(w, di, res, em)
                w.set_s64(cout, mask_to_int((res < p) & em))
                return
            if signed:
                p = [int(x) * int(y) for x, y in zip(r0(w).view(np.int32), r1(w).view(np.int32))]
                c = r2(w).view(np.int64)
            else:
                p = [int(x) * int(y) for x, y in zip(r0(w), r1(w))]
                c = r2(w)
            full = [pi + int(ci) for pi, ci in zip(p, c)]
            res = np.array([f & (2**64 - 1) for f in full], U64)
            carry = np.array([f >> 64 != 0 if not signed else not (-2**63 <= f < 2**63) for f in full], bool)
            write_v64(w, di, res, em)
            w.set_s64(cout, mask_to_int(carry & em))
        return run
    return compile_


def _div_scale(ins: Instruction, base: str, enc: str):
    # V_DIV_SCALE_F32: D = S0 scaled by 2^±64 when the quotient S2 / S1 would leave the normal
    # range, VCC set when the final result must be rescaled. Implemented for the cases where no
    # scaling is needed (both operands normal, exponents within the safe range); other inputs
    # pass S0 through, and V_DIV_FIXUP_F32 produces the IEEE special values.
    di = vdst_index(ins.operands[0])
    vcc = ins.operands[1].index
    r0, r1, r2 = (reader32(o) for o in ins.operands[2:5])

    def run(w):
        em = w.exec_mask()
        s0, s1, s2 = f32(r0(w)), f32(r1(w)), f32(r2(w))
        e1 = (r1(w) >> U32(23)) & U32(0xFF)
        e2 = (r2(w) >> U32(23)) & U32(0xFF)
        finite = np.isfinite(s1) & np.isfinite(s2) & (s1 != 0) & (s2 != 0)
        risky = finite & ((e1 == 0) | (e2 == 0) | (e2.astype(int) - e1.astype(int) >= 96)
                          | (e1.astype(int) >= 253) | (e2.astype(int) <= 23))
        if (risky & em).any():
            raise Unsupported("v_div_scale_f32 on operands that need scaling (denormal or extreme exponents)")
        write_v32(w, di, bits(s0), em)
        w.set_s64(vcc, 0)
    return run


def _div_fmas(ins: Instruction, base: str, enc: str):
    di = vdst_index(ins.operands[0])
    r0, r1, r2 = (reader32(o) for o in ins.operands[1:4])

    def run(w):
        em = w.exec_mask()
        if w.get_s64(VCC) & mask_to_int(em):
            raise Unsupported("v_div_fmas_f32 with VCC set (scaled division)")
        write_v32(w, di, bits(fma32(f32(r0(w)), f32(r1(w)), f32(r2(w)))), em)
    return run


def _div_fixup(ins: Instruction, base: str, enc: str):
    # V_DIV_FIXUP_F32: D = S0 (the quotient) unless S1 (denominator) or S2 (numerator) is a
    # special value, where the IEEE result of S2 / S1 is returned.
    di = vdst_index(ins.operands[0])
    r0, r1, r2 = (reader32(o) for o in ins.operands[1:4])

    def run(w):
        q, d, n = f32(r0(w)), f32(r1(w)), f32(r2(w))
        special = ~np.isfinite(d) | ~np.isfinite(n) | (d == 0) | (n == 0) | np.isnan(q)
        res = np.where(special, n / d, q)
        write_v32(w, di, bits(res), w.exec_mask())
    return run


def _readfirstlane(ins: Instruction, base: str, enc: str):
    d = swriter(ins.operands[0], 32)
    r = reader32(ins.operands[1])

    def run(w):
        em = w.exec_mask()
        lane = int(np.argmax(em)) if em.any() else 0
        d(w, int(r(w)[lane]))
    return run


def _readlane(ins: Instruction, base: str, enc: str):
    d = swriter(ins.operands[0], 32)
    r = reader32(ins.operands[1])
    lane = sreader(ins.operands[2], 32)
    return lambda w: d(w, int(r(w)[lane(w) & 63]))


def _writelane(ins: Instruction, base: str, enc: str):
    di = vdst_index(ins.operands[0])
    val = sreader(ins.operands[1], 32)
    lane = sreader(ins.operands[2], 32)

    def run(w):
        w.v[di][lane(w) & 63] = val(w)
    return run


def _accmove(ins: Instruction, base: str, enc: str):
    di = vdst_index(ins.operands[0])
    r = reader32(ins.operands[1])
    return lambda w: write_v32(w, di, r(w), w.exec_mask())


def _pk_f32(fn, nsrc):
    """V_PK_*_F32 (ISA: "Packed math"): two fp32 lanes per 64-bit register pair; op_sel picks the
    half of each source for the low result, op_sel_hi for the high result; neg_lo/neg_hi negate."""
    def compile_(ins: Instruction, base: str, enc: str):
        di = vdst_index(ins.operands[0])
        srcs = ins.operands[1:1 + nsrc]

        def flags(name, default):
            t = ins.mods.get(name)
            return [int(x) for x in t.strip("[]").split(",")] if t else [default] * nsrc
        sel_lo, sel_hi = flags("op_sel", 0), flags("op_sel_hi", 1)
        neg_lo, neg_hi = flags("neg_lo", 0), flags("neg_hi", 0)
        halves = []
        for op in srcs:
            if op.kind in ("v", "a", "s") and op.count == 2:
                i = op.index + (256 if op.kind == "a" else 0)
                if op.kind == "s":
                    halves.append((lambda w, i=i: np.full(LANES, w.s[i], U32), lambda w, i=i: np.full(LANES, w.s[i + 1], U32)))
                else:
                    halves.append((lambda w, i=i: w.v[i], lambda w, i=i: w.v[i + 1]))
            elif op.kind in ("imm", "float"):
                c = reader32(op)
                halves.append((c, c))
            else:
                raise Unsupported(f"{ins.opcode} operand {op.text}")

        def pick(w, k, sel, neg):
            x = f32(halves[k][sel](w))
            return -x if neg else x

        def run(w):
            em = w.exec_mask()
            lo = fn(*[pick(w, k, sel_lo[k], neg_lo[k]) for k in range(nsrc)])
            hi = fn(*[pick(w, k, sel_hi[k], neg_hi[k]) for k in range(nsrc)])
            write_v32(w, di, bits(lo), em)
            write_v32(w, di + 1, bits(hi), em)
        return run
    return compile_


def _opsel_flags(ins: Instruction, name: str, n: int, default: int = 0) -> list[int]:
    t = ins.mods.get(name)
    return [int(x) for x in t.strip("[]").split(",")] if t else [default] * n


def _pack_b32_f16(ins: Instruction, base: str, enc: str):
    # V_PACK_B32_F16: D[15:0] = S0's half op_sel[0], D[31:16] = S1's half op_sel[1].
    di = vdst_index(ins.operands[0])
    r0, r1 = reader32(ins.operands[1]), reader32(ins.operands[2])
    sel = _opsel_flags(ins, "op_sel", 3)
    if "neg_lo" in ins.mods or "neg_hi" in ins.mods:
        raise Unsupported("v_pack_b32_f16 with neg")

    def run(w):
        lo = (r0(w) >> U32(16 * sel[0])) & U32(0xFFFF)
        hi = (r1(w) >> U32(16 * sel[1])) & U32(0xFFFF)
        write_v32(w, di, lo | (hi << U32(16)), w.exec_mask())
    return run


def _pk_mov_b32(ins: Instruction, base: str, enc: str):
    # V_PK_MOV_B32 (gfx90a and later, VOP3P): D[31:0] = the dword op_sel[0] picks of the 64-bit S0,
    # D[63:32] = the dword op_sel[1] picks of S1 (op_sel:[0,1] copies 64 bits).
    di = vdst_index(ins.operands[0])
    r0, r1 = reader64(ins.operands[1]), reader64(ins.operands[2])
    sel = _opsel_flags(ins, "op_sel", 2)
    if any(k in ins.mods for k in ("neg_lo", "neg_hi", "clamp")):
        raise Unsupported("v_pk_mov_b32 with neg or clamp")

    def run(w):
        lo = (r0(w) >> U64(32 * sel[0])) & U64(MASK32)
        hi = (r1(w) >> U64(32 * sel[1])) & U64(MASK32)
        write_v64(w, di, lo | (hi << U64(32)), w.exec_mask())
    return run


def _fma_mix(out: str):
    """V_FMA_MIX{,LO,HI}_F16 (ISA: "VOP3P mixed precision"): each source is f32, or, where its
    op_sel_hi bit is set, the f16 half op_sel picks; the product-sum is fused and rounded once, to
    f32 (mix) or f16 (mixlo: bits 15:0, mixhi: bits 31:16, the other half kept). neg_lo negates
    a source and neg_hi takes its absolute value."""
    def compile_(ins: Instruction, base: str, enc: str):
        di = vdst_index(ins.operands[0])
        rs = [reader32(o) for o in ins.operands[1:4]]
        sel, hi = _opsel_flags(ins, "op_sel", 3), _opsel_flags(ins, "op_sel_hi", 3)
        neg, absf = _opsel_flags(ins, "neg_lo", 3), _opsel_flags(ins, "neg_hi", 3)
        if "clamp" in ins.mods:
            raise Unsupported("clamp")

        def src(w, k):
            x = rs[k](w)
            v = f16_to_f32((x >> U32(16 * sel[k])) & U32(0xFFFF)) if hi[k] else f32(x)
            v = v.astype(np.float64)
            if absf[k]:
                v = np.abs(v)
            return -v if neg[k] else v

        def run(w):
            r = src(w, 0) * src(w, 1) + src(w, 2)
            old = w.v[di]
            if out == "f32":
                res = bits(r.astype(F32))
            else:
                h = r.astype(np.float16).view(np.uint16).astype(U32)
                res = (old & U32(0xFFFF0000)) | h if out == "lo" else (old & U32(0xFFFF)) | (h << U32(16))
            write_v32(w, di, res, w.exec_mask())
        return run
    return compile_


SPECIAL_VALU = {
    "v_pack_b32_f16": _pack_b32_f16, "v_pk_mov_b32": _pk_mov_b32,
    "v_fma_mixlo_f16": _fma_mix("lo"), "v_fma_mixhi_f16": _fma_mix("hi"), "v_fma_mix_f32": _fma_mix("f32"),
    "v_cndmask_b32": _vcndmask,
    "v_add_co_u32": _vcarry("add"), "v_addc_co_u32": _vcarry("addc"),
    "v_sub_co_u32": _vcarry("sub"), "v_subb_co_u32": _vcarry("subb"),
    "v_subrev_co_u32": _vcarry("subrev"), "v_subbrev_co_u32": _vcarry("subbrev"),
    "v_mov_b64": _v64(_mov64, 1), "v_lshl_add_u64": _v64(_lshl_add_u64, 3),
    "v_lshlrev_b64": _v64(_lshlrev_b64, 2), "v_lshrrev_b64": _v64(_lshrrev_b64, 2),
    "v_ashrrev_i64": _v64(_ashrrev_i64, 2),
    "v_mad_u64_u32": _mad64(False), "v_mad_i64_i32": _mad64(True),
    "v_div_scale_f32": _div_scale, "v_div_fmas_f32": _div_fmas, "v_div_fixup_f32": _div_fixup,
    "v_readfirstlane_b32": _readfirstlane, "v_readlane_b32": _readlane, "v_writelane_b32": _writelane,
    "v_accvgpr_read_b32": _accmove, "v_accvgpr_write_b32": _accmove, "v_accvgpr_mov_b32": _accmove,
    "v_pk_mul_f32": _pk_f32(lambda a, b: a * b, 2), "v_pk_add_f32": _pk_f32(lambda a, b: a + b, 2),
    "v_pk_fma_f32": _pk_f32(fma32, 3),
}


# ---------------------------------------------------------------- LDS (ISA: "Data Share Operations")
def _lds_access(ins: Instruction, addr_k: int, body):
    """Runs body(w, em, addr) over the active lanes' LDS addresses (operand addr_k)."""
    ra = reader32(ins.operands[addr_k])

    def run(w):
        em = w.exec_mask()
        if em.any():
            body(w, em, ra(w)[em].astype(np.int64))
    return run


def _ds_pair_offsets(ins: Instruction, elem: int, stride: int) -> tuple[int, int]:
    return tuple(int(ins.mods.get(f"offset{k}", 0)) * elem * stride for k in (0, 1))  # type: ignore[return-value]


def _lds_read_into(w, em, di, addr, nbytes, what, signed=False):
    raw = w.wg.lds[w.wg.lds_index(addr, nbytes, what)]
    if nbytes >= 4:
        vals = raw.view(U32).reshape(-1, nbytes // 4)
    else:
        v = raw.view(np.uint8 if nbytes == 1 else np.uint16).ravel()
        if signed:
            v = v.view(np.int8 if nbytes == 1 else np.int16).astype(np.int32).view(U32)
        vals = v.astype(U32).reshape(-1, 1)
    for j in range(vals.shape[1]):
        w.v[di + j][em] = vals[:, j]


def _lds_write_from(w, em, si, addr, nbytes, what, d16_hi=False):
    ndw = max(1, nbytes // 4)
    data = np.stack([w.v[si + j][em] for j in range(ndw)], axis=1).copy()
    if d16_hi:  # DS_WRITE_B16_D16_HI ("Data Share Operations"): MEM[ADDR].b16 = DATA[31:16]
        data = data >> U32(16)
    data = data.view(np.uint8)
    w.wg.lds[w.wg.lds_index(addr, nbytes, what)] = data[:, :nbytes]


def _ds_read(nbytes, signed=False):
    def compile_(ins: Instruction, ctx):
        di, off = vdst_index(ins.operands[0]), int(ins.mods.get("offset", 0))
        return _lds_access(ins, 1, lambda w, em, a: _lds_read_into(w, em, di, a + off, nbytes, ins.text, signed))
    return compile_


def _ds_read2(elem, stride):
    def compile_(ins: Instruction, ctx):
        di, (o0, o1) = vdst_index(ins.operands[0]), _ds_pair_offsets(ins, elem, stride)

        def body(w, em, a):
            _lds_read_into(w, em, di, a + o0, elem, ins.text)
            _lds_read_into(w, em, di + elem // 4, a + o1, elem, ins.text)
        return _lds_access(ins, 1, body)
    return compile_


def _ds_write(nbytes, d16_hi=False):
    def compile_(ins: Instruction, ctx):
        si, off = vdst_index(ins.operands[1]), int(ins.mods.get("offset", 0))
        return _lds_access(ins, 0, lambda w, em, a: _lds_write_from(w, em, si, a + off, nbytes, ins.text, d16_hi))
    return compile_


def _ds_write2(elem, stride):
    def compile_(ins: Instruction, ctx):
        s0, s1 = vdst_index(ins.operands[1]), vdst_index(ins.operands[2])
        o0, o1 = _ds_pair_offsets(ins, elem, stride)

        def body(w, em, a):
            _lds_write_from(w, em, s0, a + o0, elem, ins.text)
            _lds_write_from(w, em, s1, a + o1, elem, ins.text)
        return _lds_access(ins, 0, body)
    return compile_


def _ds_permute(backward: bool):
    # DS_BPERMUTE_B32: lane i reads lane (addr_i + offset) / 4 mod 64; an inactive source lane
    # reads as 0. DS_PERMUTE_B32: lane i writes its value to that lane (the highest writer wins).
    def compile_(ins: Instruction, ctx):
        di = vdst_index(ins.operands[0])
        ra, rd = reader32(ins.operands[1]), reader32(ins.operands[2])
        off = int(ins.mods.get("offset", 0))

        def run(w):
            em = w.exec_mask()
            lane = ((ra(w).astype(np.int64) + off) >> 2) & 63
            data = np.where(em, rd(w), U32(0))
            if backward:
                res = data[lane]
            else:
                res = np.zeros(LANES, U32)
                for i in range(LANES):
                    if em[i]:
                        res[lane[i]] = data[i]
            write_v32(w, di, res, em)
        return run
    return compile_


LDS = {
    "ds_read_b32": _ds_read(4), "ds_read_b64": _ds_read(8), "ds_read_b96": _ds_read(12), "ds_read_b128": _ds_read(16),
    "ds_read_u8": _ds_read(1), "ds_read_i8": _ds_read(1, True), "ds_read_u16": _ds_read(2), "ds_read_i16": _ds_read(2, True),
    "ds_read2_b32": _ds_read2(4, 1), "ds_read2_b64": _ds_read2(8, 1),
    "ds_read2st64_b32": _ds_read2(4, 64), "ds_read2st64_b64": _ds_read2(8, 64),
    "ds_write_b8": _ds_write(1), "ds_write_b16": _ds_write(2), "ds_write_b32": _ds_write(4),
    "ds_write_b16_d16_hi": _ds_write(2, d16_hi=True),
    "ds_write_b64": _ds_write(8), "ds_write_b96": _ds_write(12), "ds_write_b128": _ds_write(16),
    "ds_write2_b32": _ds_write2(4, 1), "ds_write2_b64": _ds_write2(8, 1),
    "ds_write2st64_b32": _ds_write2(4, 64), "ds_write2st64_b64": _ds_write2(8, 64),
    "ds_bpermute_b32": _ds_permute(True), "ds_permute_b32": _ds_permute(False),
}


# ---------------------------------------------------------------- global memory (ISA: "Flat, Scratch and Global Instructions")
def _gaddr(ins: Instruction, vaddr_k: int, saddr_k: int = 2):
    """Per-lane addresses: 64-bit VGPR address (saddr off) or SGPR base + 32-bit VGPR offset."""
    vop, sop = ins.operands[vaddr_k], ins.operands[saddr_k]
    off = int(ins.mods.get("offset", 0))
    if sop.kind == "off":
        rv = reader64(vop)
        return lambda w: rv(w) + U64(off & (2**64 - 1))
    rs = sreader(sop, 64)
    rv = reader32(vop)
    return lambda w: U64(rs(w)) + rv(w).astype(U64) + U64(off & (2**64 - 1))


def _global_load(nbytes, signed=False, d16_hi=False):
    def compile_(ins: Instruction, ctx):
        di = vdst_index(ins.operands[0])
        addr = _gaddr(ins, 1)
        ndw = max(1, nbytes // 4)

        def run(w):
            em = w.exec_mask()
            if not em.any():
                return
            raw = ctx.memory.load(addr(w)[em], nbytes, ins.text)
            if nbytes >= 4:
                vals = raw.view(U32).reshape(-1, ndw)
                for j in range(ndw):
                    w.v[di + j][em] = vals[:, j]
                return
            v = raw.view(np.uint8 if nbytes == 1 else np.uint16).ravel()
            if d16_hi:
                old = w.v[di][em]
                w.v[di][em] = (old & U32(0xFFFF)) | (v.astype(U32) << U32(16))
                return
            if signed:
                v = v.view(np.int8 if nbytes == 1 else np.int16).astype(np.int32).view(U32)
            w.v[di][em] = v.astype(U32)
        return run
    return compile_


def _global_store(nbytes, d16_hi=False):
    def compile_(ins: Instruction, ctx):
        addr = _gaddr(ins, 0)
        si = vdst_index(ins.operands[1])
        ndw = max(1, nbytes // 4)

        def run(w):
            em = w.exec_mask()
            if not em.any():
                return
            data = np.stack([w.v[si + j][em] for j in range(ndw)], axis=1).copy()
            if d16_hi:
                data = data >> U32(16)
            ctx.memory.store(addr(w)[em], data.view(np.uint8)[:, :nbytes] if nbytes >= 4 else
                             data.view(np.uint8).reshape(-1, 4)[:, :nbytes], ins.text)
        return run
    return compile_


def _global_atomic_add_f32(ins: Instruction, ctx):
    if len(ins.operands) != 3 or "sc0" in ins.mods or "glc" in ins.mods:
        raise Unsupported(f"{ins.text}: returning atomics")
    addr = _gaddr(ins, 0)
    si = vdst_index(ins.operands[1])

    def run(w):
        em = w.exec_mask()
        for a, x in zip(addr(w)[em], w.v[si][em]):  # in lane order, one at a time
            cur = ctx.memory.load(np.array([a], U64), 4, ins.text).view(F32)
            new = (cur + np.array([x], U32).view(F32)).astype(F32)
            ctx.memory.store(np.array([a], U64), new.view(np.uint8).reshape(1, 4), ins.text)
    return run


def _global_atomic_cmpswap(ins: Instruction, ctx):
    """GLOBAL_ATOMIC_CMPSWAP (32-bit): data = {src, cmp}; MEM = MEM == cmp ? src : MEM, lane by lane
    in lane order; with glc (gfx90a) or sc0 (gfx94x) the lane's VDST gets the value before."""
    returns = "glc" in ins.mods or "sc0" in ins.mods
    first = 1 if returns else 0  # operands: [vdst,] vaddr, data, saddr
    if len(ins.operands) != first + 3 or ins.operands[first + 1].count != 2:
        raise Unsupported(f"{ins.text}: operands")
    ri = vdst_index(ins.operands[0]) if returns else None
    addr = _gaddr(ins, first, first + 2)
    di = vdst_index(ins.operands[first + 1])

    def run(w):
        em = w.exec_mask()
        lanes = np.flatnonzero(em)
        addrs = addr(w)
        old = np.zeros(LANES, U32)
        for lane in lanes:  # in lane order, one at a time
            a = np.array([addrs[lane]], U64)
            cur = ctx.memory.load(a, 4, ins.text).view(U32).ravel()[0]
            old[lane] = cur
            if cur == w.v[di + 1][lane]:
                ctx.memory.store(a, np.array([w.v[di][lane]], U32).view(np.uint8).reshape(1, 4), ins.text)
        if ri is not None:
            write_v32(w, ri, old, em)
    return run


GLOBAL = {
    "global_load_dword": _global_load(4), "global_load_dwordx2": _global_load(8),
    "global_load_dwordx3": _global_load(12), "global_load_dwordx4": _global_load(16),
    "global_load_ushort": _global_load(2), "global_load_sshort": _global_load(2, True),
    "global_load_ubyte": _global_load(1), "global_load_sbyte": _global_load(1, True),
    "global_load_short_d16_hi": _global_load(2, d16_hi=True),
    "global_store_dword": _global_store(4), "global_store_dwordx2": _global_store(8),
    "global_store_dwordx3": _global_store(12), "global_store_dwordx4": _global_store(16),
    "global_store_short": _global_store(2), "global_store_byte": _global_store(1),
    "global_store_short_d16_hi": _global_store(2, d16_hi=True),
    "global_atomic_add_f32": _global_atomic_add_f32, "global_atomic_cmpswap": _global_atomic_cmpswap,
}


# ---------------------------------------------------------------- MFMA (ISA: "Matrix Arithmetic Instructions")
def _mfma(ins: Instruction, base: str, enc: str):
    if ins.opcode not in MFMA_TABLES:
        return None
    for m in ("cbsz", "abid", "blgp"):
        if int(ins.mods.get(m, 0)):
            raise Unsupported(f"{ins.opcode} with {m}")
    shape = mfma_shape(ins.opcode)
    d, a, b, c = ins.operands[:4]
    di = vdst_index(d)
    ai, bi = vdst_index(a), vdst_index(b)
    if a.count != shape.a_regs or b.count != shape.b_regs or d.count != shape.d_regs:
        raise EmulatorError(f"{ins.text}: register counts do not match the instruction's layout")
    conv = bf16_to_f32 if shape.in_type == "bf16" else f16_to_f32
    a_reg, a_lane, a_half = shape.a
    b_reg, b_lane, b_half = shape.b
    d_reg, d_lane, _ = shape.d
    c_zero = c.kind == "imm" and c.index == 0
    if not c_zero:
        ci = vdst_index(c)

    def gather(regs, reg, lane, half):
        return conv((regs[reg, lane] >> (U32(16) * half.astype(U32))) & U32(0xFFFF))

    def run(w):
        if not w.exec_mask().all():
            raise Unsupported(f"{ins.text} with EXEC not all ones")
        A = gather(w.v[ai:ai + shape.a_regs], a_reg, a_lane, a_half).astype(np.float64)
        B = gather(w.v[bi:bi + shape.b_regs], b_reg, b_lane, b_half).astype(np.float64)
        acc = A @ B
        if not c_zero:
            acc = acc + f32(w.v[ci:ci + shape.d_regs][d_reg, d_lane]).astype(np.float64)
        out = np.empty((shape.d_regs, LANES), U32)
        out[d_reg, d_lane] = bits(acc.astype(F32))
        w.v[di:di + shape.d_regs] = out
    return run


# ---------------------------------------------------------------- compile a program
_KNOWN_MODS = {"clamp", "offset", "offset0", "offset1", "off", "sc0", "sc1", "nt", "op_sel", "op_sel_hi", "neg_lo",
               "neg_hi", "dst_sel", "dst_unused", "src0_sel", "src1_sel", "bitop3", "cbsz", "abid", "blgp",
               "lgkmcnt", "vmcnt", "expcnt", "glc", "slc"}


def compile_instruction(ins: Instruction, prog: Program, ctx):
    """A closure running `ins` on a wave, or None for an instruction without effect here.
    Raises Unsupported naming the instruction when the emulator has no semantics for it."""
    for k in ins.mods:
        if k not in _KNOWN_MODS:
            raise Unsupported(f"modifier {k!r}")
    op = ins.opcode
    if op in FLOW:
        return FLOW[op](ins, prog)
    if op in SALU:
        return SALU[op](ins)
    if op in SMEM:
        return SMEM[op](ins, ctx)
    if op in LDS:
        return LDS[op](ins, ctx)
    if op in GLOBAL:
        return GLOBAL[op](ins, ctx)
    base, enc = _split(op)
    if enc == "dpp":
        raise Unsupported("DPP")
    if op.startswith("v_mfma"):
        f = _mfma(ins, base, enc)
        if f:
            return f
    if base.startswith("v_cmp"):
        f = _vcmp(ins, base, enc)
        if f:
            return f
    if base in SPECIAL_VALU:
        return SPECIAL_VALU[base](ins, base, enc)
    f = _valu_generic(ins, base, enc)
    if f is not None:
        return f
    raise Unsupported("no semantics")


def compile_program(instructions: list[Instruction], ctx) -> tuple[Program, list]:
    prog = Program(instructions)
    closures, unknown = [], {}
    for ins in instructions:
        try:
            closures.append(compile_instruction(ins, prog, ctx))
        except Unsupported as e:
            unknown.setdefault(ins.opcode, f"{ins.text} ({e})")
            closures.append(None)
    if unknown:
        raise Unsupported("the emulator cannot run these instructions: " + "; ".join(unknown.values()))
    return prog, closures


def opcodes_supported(instructions: list[Instruction]) -> dict[str, str]:
    """Opcode -> reason for every instruction the emulator would refuse (empty when all run)."""
    class _Ctx:
        memory = None
    prog = Program(instructions)
    bad = {}
    for ins in instructions:
        try:
            compile_instruction(ins, prog, _Ctx)
        except Unsupported as e:
            bad.setdefault(ins.opcode, f"{ins.text} ({e})")
    return bad


# ---------------------------------------------------------------- dispatch
class Dispatch:
    """Runs one kernel over a grid: the state a dispatch packet and the kernel descriptor set up
    (LLVM AMDGPU usage, "Initial Kernel Execution State")."""

    def __init__(self, memory: Memory, instructions: list[Instruction], kd, arch: str):
        self.memory = memory
        self.kd = kd
        self.arch = arch
        self.prog, self.closures = compile_program(instructions, self)
        if kd.wave32:
            raise Unsupported("wave32 kernels")
        if kd.kernarg_preload & 0x7F:
            raise Unsupported("kernel argument preloading")
        if kd.private_segment_fixed_size:
            raise Unsupported("scratch (private segment) use")
        self.max_instructions = 50_000_000
        self.executed = 0
        # Hazard probes (the results must not change): `reverse` runs a workgroup's waves in
        # reverse order between barriers, so that a read of another wave's LDS data without a
        # barrier between them sees the other value; `poison` starts VGPRs, AGPRs (but the
        # work-item IDs) and LDS as NaN, so that a read before any write shows.
        self.reverse = False
        self.poison = False

    def run(self, grid: tuple[int, int, int], block: tuple[int, int, int], kernarg_addr: int,
            dynamic_lds: int = 0, dispatch_ptr: int = 0):
        threads = block[0] * block[1] * block[2]
        waves = (threads + LANES - 1) // LANES
        lds = self.kd.group_segment_fixed_size + dynamic_lds
        for gz in range(grid[2]):
            for gy in range(grid[1]):
                for gx in range(grid[0]):
                    self._run_workgroup((gx, gy, gz), block, threads, waves, lds, kernarg_addr, dispatch_ptr)

    def _init_wave(self, wg, w_id, wgid, block, threads, kernarg_addr, dispatch_ptr):
        w = Wave(wg, w_id)
        if self.poison:
            w.v[:] = U32(0x01010101 * POISON_BYTE)
        kd = self.kd
        for name, first, count in kd.user_sgpr_layout():
            if name == "kernarg_segment_ptr":
                w.set_s64(first, kernarg_addr)
            elif name == "dispatch_ptr":
                w.set_s64(first, dispatch_ptr)
            elif name in ("private_segment_buffer", "flat_scratch_init", "private_segment_size"):
                pass  # no scratch: the kernel may set them up but must not use them
            else:
                raise Unsupported(f"user SGPR {name}")
        s = kd.user_sgpr_count
        for dim, on in enumerate(kd.workgroup_id_enabled):
            if on:
                w.s[s] = wgid[dim]
                s += 1
        if kd.workgroup_info_enabled:
            raise Unsupported("workgroup info SGPR")
        if kd.enable_private_segment:
            w.s[s] = 0
            s += 1
        flat = np.arange(w_id * LANES, (w_id + 1) * LANES)
        x = flat % block[0]
        y = (flat // block[0]) % block[1]
        z = flat // (block[0] * block[1])
        active = flat < threads
        packed = self.arch in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
        if packed:
            w.v[0] = (x | (y << 10) | (z << 20)).astype(U32)
        else:
            w.v[0] = x.astype(U32)
            if kd.vgpr_workitem_id >= 1:
                w.v[1] = y.astype(U32)
            if kd.vgpr_workitem_id >= 2:
                w.v[2] = z.astype(U32)
        w.set_s64(EXEC, mask_to_int(active))
        return w

    def _run_workgroup(self, wgid, block, threads, nwaves, lds, kernarg_addr, dispatch_ptr):
        wg = Workgroup(lds, self.poison)
        waves = [self._init_wave(wg, i, wgid, block, threads, kernarg_addr, dispatch_ptr) for i in range(nwaves)]
        if self.reverse:
            waves.reverse()
        closures, prog = self.closures, self.prog
        while True:
            progressed = False
            for w in waves:
                if w.state != "run":
                    continue
                progressed = True
                n = 0
                try:
                    while w.state == "run":
                        pc = w.pc
                        w.pc = pc + 1
                        f = closures[pc]
                        if f is not None:
                            f(w)
                        n += 1
                except EmulatorError as e:
                    raise EmulatorError(f"workgroup {wgid} wave {w.wave_id} at {prog.ins[pc]!r}: {e}") from None
                except IndexError:
                    if pc >= len(closures):
                        raise EmulatorError(f"workgroup {wgid} wave {w.wave_id} ran past the end of the kernel") from None
                    raise
                self.executed += n
                if self.executed > self.max_instructions:
                    raise EmulatorError("instruction limit reached (a loop that does not end?)")
            live = [w for w in waves if w.state != "done"]
            if not live:
                return
            if all(w.state == "barrier" for w in live):
                for w in live:
                    w.state = "run"
            elif not progressed:
                raise EmulatorError(f"workgroup {wgid}: deadlock")
