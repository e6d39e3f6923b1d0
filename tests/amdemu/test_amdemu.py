"""The emulator tier: kgen's AMD code objects, unmodified, run on kgen's CDNA emulator
(tools/amdemu) at small shapes and compared with float64 references on NaN-poisoned outputs.

A few cases run by default; KGEN_AMDEMU_ALL=1 runs every case. KGEN_BIN names the kgen CLI (ctest
sets it). Everything skips when clang-22, llvm-objdump-22 or the CLI is missing."""
import os
import sys

import pytest

np = pytest.importorskip("numpy")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "amdemu"))

import emu  # noqa: E402
import kgen_driver as kd  # noqa: E402
from disasm import parse_line  # noqa: E402

KGEN_BIN = os.environ.get("KGEN_BIN") or os.path.join(kd.REPO, "build", "bin", "kgen")
ALL = os.environ.get("KGEN_AMDEMU_ALL") == "1"
SIMT = "simt:bm4:bn32:dmax64"
F = kd.ForwardCase

# (case, in the default subset)
FORWARD_CASES = [
    (F("gfx942", "fp32", 64, False, SIMT), True),
    (F("gfx942", "bf16", 64, True, SIMT, n_q=45, n_k=20), False),
    (F("gfx942", "fp32", 64, True, SIMT), False),
    (F("gfx942", "bf16", 64, False, SIMT), False),
    # MFMA defaults (generator/attention_mfma.cpp): odd sizes, causal, GQA, rows that see no key
    (F("gfx942", "bf16", 64, True, None, heads_q=4, heads_kv=2, n_q=150, n_k=100), True),
    (F("gfx942", "bf16", 128, False, None), False),
    (F("gfx942", "bf16", 64, False, None), False),
    (F("gfx942", "fp16", 128, True, None), False),
    (F("gfx942", "fp16", 64, False, None, batch=2, heads_q=2, heads_kv=1, n_q=70, n_k=130), False),
]


def _skip_reason():
    return kd.missing_tools(KGEN_BIN)


@pytest.mark.parametrize("case", [c for c, default in FORWARD_CASES if default or ALL], ids=lambda c: c.name)
def test_forward(case):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    r = kd.run_forward(KGEN_BIN, case)
    assert not r["errors"], f"{r['variant']} on {case.name}: " + "; ".join(r["errors"])


def test_parse_operands_and_modifiers():
    ins = parse_line("\tds_read2_b32 v[14:15], v16 offset0:192 offset1:224         // 000000001A28: D86EC0E0 0E000010")
    assert ins.opcode == "ds_read2_b32" and ins.addr == 0x1A28 and ins.size == 8
    assert (ins.operands[0].kind, ins.operands[0].index, ins.operands[0].count) == ("v", 14, 2)
    assert ins.mods == {"offset0": "192", "offset1": "224"}
    ins = parse_line("\tv_fma_f32 v66, v163, s33, -v78    // 000000001B00: D1CB0042 85384F4A")
    assert ins.operands[3].neg and ins.operands[2].kind == "s"
    ins = parse_line("\tv_and_b32_sdwa v162, v92, v148 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD"
                     " // 000000002000: 00000000 00000000")
    assert ins.mods["src0_sel"] == "WORD_1" and len(ins.operands) == 3


def test_unknown_instruction_fails_by_name():
    ins = [parse_line("\tv_mov_b32_e32 v1, 0   // 000000001600: 7E020280"),
           parse_line("\tv_frobnicate_b32 v1, v2   // 000000001604: 7E020280"),
           parse_line("\ts_endpgm   // 000000001608: BF810000")]
    with pytest.raises(emu.Unsupported, match="v_frobnicate_b32"):
        emu.compile_program(ins, None)


@pytest.mark.parametrize("op", sorted(emu.MFMA_TABLES))
def test_mfma_tables_are_permutations_and_multiply(op):
    """Every (lane, register half) of the calculator's tables holds one matrix entry, and the
    emulator's MFMA through them computes A·B + C."""
    shape = emu.mfma_shape(op)
    for reg, lane, half in (shape.a, shape.b):
        slots = set(zip(reg.ravel(), lane.ravel(), half.ravel()))
        assert len(slots) == reg.size == 64 * 2 * shape.a_regs
    reg, lane, _ = shape.d
    assert len(set(zip(reg.ravel(), lane.ravel()))) == 32 * 32 == 64 * shape.d_regs
    rng = np.random.default_rng(1)
    A = rng.integers(-4, 5, (32, shape.a[0].shape[1])).astype(np.float32)
    B = rng.integers(-4, 5, (shape.b[0].shape[0], 32)).astype(np.float32)
    C = rng.integers(-4, 5, (32, 32)).astype(np.float32)
    w = emu.Wave(None, 0)
    w.set_s64(emu.EXEC, (1 << 64) - 1)

    def store(m, layout, base):
        r, l, h = layout
        h16 = kd.to_bits(m, "bf16" if shape.in_type == "bf16" else "fp16").view(np.uint16).astype(np.uint32)
        for idx in np.ndindex(m.shape):
            w.v[base + r[idx], l[idx]] |= h16[idx] << (16 * h[idx])
    store(A, shape.a, 10)
    store(B, shape.b, 20)
    w.v[40 + reg, lane] = C.view(np.uint32)
    ins = parse_line(f"\t{op} v[60:75], v[10:{9 + shape.a_regs}], v[20:{19 + shape.b_regs}], v[40:55] // 000000001600: 00000000 00000000")
    emu.compile_instruction(ins, None, None)(w)
    D = w.v[60 + reg, lane].view(np.float32)
    assert np.array_equal(D, A @ B + C)


# Kernels the tier does not run yet, whose every instruction must already have semantics here.
COVERAGE_CASES = [("gfx942", "attention_bwd", "attention_bwd.bf16.d128.causal", True),
                  ("gfx942", "attention_bwd", "attention_bwd.fp16.d128.full", False),
                  ("gfx942", "attention_bwd", "attention_bwd.fp16.d64.causal", False)]


@pytest.mark.parametrize("arch,op,variant", [c[:3] for c in COVERAGE_CASES if c[3] or ALL], ids=lambda x: str(x))
def test_every_instruction_known(arch, op, variant):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    import subprocess
    env = dict(os.environ, KGEN_CACHE_DIR=os.path.join(kd.work_dir(), "cache"), KGEN_LOG_LEVEL="warn")
    text = subprocess.run([KGEN_BIN, "inspect", "--op", op, "--variant", variant, "--arch", arch, "--show", "isa"],
                          check=True, capture_output=True, text=True, env=env).stdout
    ins = [i for i in (parse_line(line) for line in text.splitlines()) if i]
    assert len(ins) > 100
    assert emu.opcodes_supported(ins) == {}
