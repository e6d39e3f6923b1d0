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


B = kd.BackwardCase
# Issue 50's gfx942 failures on tinygrad's mock GPU: key-major fp16 d = 128 (192 x 192 full,
# 64 x 64 causal) and the deterministic dQ kernel of fp16 d = 128 causal :c2.
ISSUE_CASES = [B("gfx942", "fp16", 128, False, None, n_q=192, n_k=192),
               B("gfx942", "fp16", 128, True, None, n_q=64, n_k=64),
               B("gfx942", "fp16", 128, True, "mfma:bm32:bn64:w2:c2", deterministic=True, n_q=64, n_k=64)]
# (case, in the default subset). The MFMA backward: kgen's default (mfma:bm32:bn64:w2,
# generator/attention_mfma.cpp) in both modes (atomic: preprocess, kv_atomic, dq_convert;
# deterministic: preprocess, kv, dq), the rest of gfx942's config space, the shapes of issue 50.
BACKWARD_CASES = [
    (B("gfx942", "bf16", 64, True, None, n_q=45, n_k=37), True),
    (B("gfx942", "bf16", 64, False, None, batch=2, heads_q=4, heads_kv=2, n_q=70, n_k=100), False),
    (B("gfx942", "bf16", 64, True, None, deterministic=True, heads_q=4, heads_kv=2, n_q=100, n_k=70), False),  # rows see no key
    (B("gfx942", "bf16", 128, True, None, n_q=70, n_k=70), False),
    (B("gfx942", "bf16", 128, False, None, deterministic=True), False),
    (B("gfx942", "fp16", 64, True, None, n_q=37, n_k=80), False),
    (B("gfx942", "fp16", 64, False, None, deterministic=True, n_q=80, n_k=37), False),
    (B("gfx942", "fp16", 128, False, None), False),
    (B("gfx942", "fp16", 128, True, None, deterministic=True), False),
    *((c, False) for c in ISSUE_CASES),
    # The rest of gfx942's config space (LDS: the 64 KiB allow these).
    (B("gfx942", "fp16", 64, False, "mfma:bm64:bn64:w2", n_q=100, n_k=130), False),
    (B("gfx942", "bf16", 64, True, "mfma:bm64:bn64:w2", deterministic=True, heads_q=4, heads_kv=2, n_q=70, n_k=40), False),
    (B("gfx942", "fp16", 64, True, "mfma:bm32:bn128:w4", deterministic=True, n_q=100, n_k=130), False),
    (B("gfx942", "bf16", 64, False, "mfma:bm32:bn128:w4", batch=2, n_q=50, n_k=70), False),
    (B("gfx942", "fp16", 128, False, "mfma:bm32:bn64:w2:c2", n_q=50, n_k=70), False),
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


@pytest.mark.parametrize("case", [c for c, default in BACKWARD_CASES if default or ALL], ids=lambda c: c.name)
def test_backward(case):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    r = kd.run_backward(KGEN_BIN, case)
    assert not r["errors"], f"{r['variant']} ({', '.join(r['kernels'])}) on {case.name}: " + "; ".join(r["errors"])


# Issue 50's gfx942 cases again with the emulator's hazard probes (waves in reverse order between
# barriers, VGPRs/AGPRs/LDS NaN before their first write): a missing barrier or a read before a
# write would change the bits.
HAZARD_CASES = ISSUE_CASES + [BACKWARD_CASES[2][0]]  # and rows that see no key, GQA


@pytest.mark.parametrize("case", HAZARD_CASES if ALL else [], ids=lambda c: c.name)
def test_backward_hazards(case):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    plain = kd.run_backward(KGEN_BIN, case)
    probed = kd.run_backward(KGEN_BIN, case, hazards=True)
    assert not probed["errors"], f"{probed['variant']} on {case.name} with hazard probes: " + "; ".join(probed["errors"])
    for name, out in plain["out"].items():
        assert np.array_equal(out, probed["out"][name]), f"{name} changes under the hazard probes"


def test_backward_reference_is_the_gradient():
    """The float64 backward reference against central differences of L = Σ O∘dO (causal, GQA,
    a row that sees no key)."""
    rng = np.random.default_rng(3)
    q, do = rng.standard_normal((2, 1, 2, 5, 4))
    k, v = rng.standard_normal((2, 1, 1, 3, 4))
    scale = 0.7
    grads = kd.attention_backward_reference(q, k, v, do, True, scale)
    h = 1e-6
    for x, g in zip((q, k, v), grads):
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + h
            up = np.sum(kd.attention_reference(q, k, v, True, scale)[0] * do)
            x[idx] = old - h
            down = np.sum(kd.attention_reference(q, k, v, True, scale)[0] * do)
            x[idx] = old
            assert abs((up - down) / (2 * h) - g[idx]) < 1e-6


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


# Kernels the tier does not run yet: gfx950's, whose every instruction but the 32x32x16 MFMAs
# (no layout source: the calculator 1.3.2 stops at CDNA3) already has semantics here. Issue 50's
# third failure is the deterministic kv kernel of gfx950 bf16 mfma:bm64:bn128:w4.
GFX950_MFMA = {"v_mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x16_bf16"}
COVERAGE_CASES = [("gfx950", "attention_bwd", "attention_bwd.bf16.d128.causal.deterministic", "mfma:bm64:bn128:w4"),
                  ("gfx950", "attention_bwd", "attention_bwd.fp16.d64.full", None),
                  ("gfx950", "attention_fwd", "attention_fwd.bf16.d128.causal", None)]


@pytest.mark.parametrize("arch,op,variant,config", COVERAGE_CASES if ALL else [], ids=lambda x: str(x))
def test_every_instruction_known(arch, op, variant, config):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    import subprocess
    env = dict(os.environ, KGEN_CACHE_DIR=os.path.join(kd.work_dir(), "cache"), KGEN_LOG_LEVEL="warn")
    cmd = [KGEN_BIN, "inspect", "--op", op, "--variant", variant, "--arch", arch, "--show", "isa"]
    text = subprocess.run(cmd + (["--config", config] if config else []),
                          check=True, capture_output=True, text=True, env=env).stdout
    ins = [i for i in (parse_line(line) for line in text.splitlines()) if i]
    assert len(ins) > 100
    assert set(emu.opcodes_supported(ins)) <= GFX950_MFMA
