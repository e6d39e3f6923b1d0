"""The emulator tier: kgen's AMD code objects, unmodified, run on kgen's CDNA emulator
(tools/amdemu) at small shapes and compared with float64 references on NaN-poisoned outputs.

A few cases run by default; KGEN_AMDEMU_ALL=1 runs every case. KGEN_BIN names the kgen CLI (ctest
sets it). Everything skips when clang-22, llvm-objdump-22 or the CLI is missing."""
import os
import sys

import pytest

np = pytest.importorskip("numpy")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "amdemu"))

import budgets  # noqa: E402
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
    # K and V rows longer than d (stride_n = d + 40, NaN between rows): the next tile's loads'
    # 32-bit offsets and their clamp at n_k (150 keys: two whole tiles and a partial one)
    (F("gfx942", "bf16", 128, True, None, n_q=100, n_k=150, kv_pad=40), False),
    # Several whole tiles (no mask, no clamp on the next tile's rows) before the general steps,
    # beside waves past n_q (n_q = 70: two of block 0's four waves have no row) and, causal, on
    # the diagonal blocks
    (F("gfx942", "bf16", 128, False, None, n_q=70, n_k=300), False),
    (F("gfx942", "bf16", 128, True, None, heads_q=2, heads_kv=1, n_q=300, n_k=300), False),
    (F("gfx942", "fp16", 128, False, None, heads_q=2, heads_kv=1, n_q=45, n_k=70), False),
    (F("gfx942", "fp16", 64, True, None, batch=2, n_q=70, n_k=45), False),
    # The rest of gfx942's forward config space (SwizzledLds at every tile shape: K rows of 64 and
    # 128 columns, Vᵀ rows of 32, 64 and 128 keys, 2- and 4-wave blocks; at d = 64 the default
    # takes 128-key tiles, bn64 is the former default)
    (F("gfx942", "bf16", 128, True, "mfma:bm128:bn32:w4", n_q=100, n_k=150), False),
    (F("gfx942", "fp16", 128, False, "mfma:bm64:bn64:w2", n_q=70, n_k=150, kv_pad=40), False),
    (F("gfx942", "bf16", 128, False, "mfma:bm64:bn32:w2", n_q=45, n_k=100), False),
    (F("gfx942", "fp16", 64, True, "mfma:bm128:bn64:w4", n_q=150, n_k=300), False),
    (F("gfx942", "bf16", 64, False, "mfma:bm64:bn128:w2", n_q=70, n_k=300), False),
    (F("gfx942", "bf16", 64, True, "mfma:bm64:bn32:w2", heads_q=2, heads_kv=1, n_q=70, n_k=45), False),
    # 128-key tiles at d = 128: 64 KiB swizzled, in gfx90a's and gfx942's config space since
    (F("gfx942", "bf16", 128, True, "mfma:bm128:bn128:w4", n_q=150, n_k=300), False),
    (F("gfx942", "fp16", 128, False, "mfma:bm64:bn128:w2", n_q=70, n_k=150, kv_pad=40), False),
    (F("gfx90a", "bf16", 128, False, "mfma:bm64:bn128:w2", n_q=45, n_k=300), False),
    # gfx90a (CDNA2, built by clang 22): simt, the MFMA defaults (128-key tiles at d = 64) and the
    # rest of its config space
    (F("gfx90a", "fp32", 64, False, SIMT), False),
    (F("gfx90a", "bf16", 64, True, SIMT, n_q=45, n_k=20), False),
    (F("gfx90a", "fp16", 64, False, SIMT), False),
    (F("gfx90a", "fp16", 128, True, None, heads_q=4, heads_kv=2, n_q=100, n_k=70), True),
    (F("gfx90a", "bf16", 64, True, None, heads_q=4, heads_kv=2, n_q=150, n_k=100), False),
    (F("gfx90a", "bf16", 128, False, None, batch=2), False),
    (F("gfx90a", "fp16", 64, False, None, n_q=70, n_k=130), False),
    (F("gfx90a", "bf16", 128, False, "mfma:bm64:bn32:w2", n_q=70, n_k=100), False),
    (F("gfx90a", "fp16", 64, True, "mfma:bm128:bn64:w4", n_q=150, n_k=150), False),
    (F("gfx90a", "bf16", 64, False, None, n_q=40, n_k=150, kv_pad=40), False),
    (F("gfx90a", "fp16", 128, False, None, n_q=45, n_k=70), False),
    (F("gfx90a", "fp16", 64, True, None, heads_q=2, heads_kv=1, n_q=70, n_k=45), False),
    (F("gfx90a", "bf16", 128, True, None, n_q=37, n_k=90), False),
    # gfx950: the simt kernels only (no MFMA: its 32x32x16 layouts have no source, below)
    (F("gfx950", "bf16", 64, True, SIMT, n_q=45, n_k=20), True),
    (F("gfx950", "fp32", 64, False, SIMT), False),
    (F("gfx950", "fp16", 64, True, SIMT, heads_q=4, heads_kv=2), False),
]


B = kd.BackwardCase
# Issue 50's gfx942 failures on tinygrad's mock GPU: key-major fp16 d = 128 (192 x 192 full,
# 64 x 64 causal) and the deterministic dQ kernel of fp16 d = 128 causal :c2.
ISSUE_CASES = [B("gfx942", "fp16", 128, False, None, n_q=192, n_k=192),
               B("gfx942", "fp16", 128, True, None, n_q=64, n_k=64),
               B("gfx942", "fp16", 128, True, "mfma:bm32:bn64:w2:c2", deterministic=True, n_q=64, n_k=64)]
# gfx90a's d = 128 defaults (one block per key block, as on gfx942), also under the hazard probes.
GFX90A_D128_CASES = [B("gfx90a", "fp16", 128, False, None, n_q=80, n_k=80),
                     B("gfx90a", "bf16", 128, True, None, deterministic=True, n_q=64, n_k=64)]
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
    (B("gfx942", "bf16", 64, False, None, deterministic=True, n_q=45, n_k=70), False),
    (B("gfx942", "bf16", 128, False, None, heads_q=2, heads_kv=1, n_q=37, n_k=50), False),
    (B("gfx942", "bf16", 128, True, None, deterministic=True, n_q=50, n_k=37), False),
    (B("gfx942", "fp16", 64, True, None, deterministic=True, batch=2, n_q=37, n_k=45), False),
    (B("gfx942", "fp16", 64, False, None, heads_q=4, heads_kv=2, n_q=45, n_k=37), False),
    (B("gfx942", "fp16", 128, False, None, deterministic=True, heads_q=2, heads_kv=1, n_q=37, n_k=45), False),
    # The rest of gfx942's config space (LDS: the 64 KiB allow these).
    (B("gfx942", "fp16", 64, False, "mfma:bm64:bn64:w2", n_q=100, n_k=130), False),
    (B("gfx942", "bf16", 64, True, "mfma:bm64:bn64:w2", deterministic=True, heads_q=4, heads_kv=2, n_q=70, n_k=40), False),
    (B("gfx942", "fp16", 64, True, "mfma:bm32:bn128:w4", deterministic=True, n_q=100, n_k=130), False),
    (B("gfx942", "bf16", 64, False, "mfma:bm32:bn128:w4", batch=2, n_q=50, n_k=70), False),
    (B("gfx942", "fp16", 128, False, "mfma:bm32:bn64:w2:c2", n_q=50, n_k=70), False),
    # The simt backward (preprocess, simt_dkdv, simt_dq): fp32's default, and bf16 by config.
    (B("gfx942", "fp32", 64, True, None, n_q=45, n_k=37), False),
    # gfx90a: its MFMA defaults (the atomic dQ a CAS loop, global_atomic_cmpswap), the rest of
    # its config space (LDS: 64 KiB), two column splits by config, simt.
    *((c, False) for c in GFX90A_D128_CASES),
    (B("gfx90a", "fp16", 128, True, None, n_q=45, n_k=37), True),
    (B("gfx90a", "bf16", 64, True, None, n_q=45, n_k=37), False),
    (B("gfx90a", "bf16", 64, False, None, batch=2, heads_q=4, heads_kv=2, n_q=70, n_k=100), False),
    (B("gfx90a", "fp16", 64, True, None, deterministic=True, heads_q=4, heads_kv=2, n_q=100, n_k=70), False),
    (B("gfx90a", "bf16", 128, False, None, deterministic=True, n_q=70, n_k=70), False),
    (B("gfx90a", "fp16", 128, True, None, deterministic=True, n_q=37, n_k=50), False),
    (B("gfx90a", "fp16", 128, False, None, deterministic=True, heads_q=2, heads_kv=1, n_q=45, n_k=37), False),
    (B("gfx90a", "bf16", 128, True, None, n_q=50, n_k=37), False),
    (B("gfx90a", "bf16", 128, False, None, n_q=37, n_k=45), False),
    (B("gfx90a", "bf16", 64, True, None, deterministic=True, n_q=45, n_k=37), False),
    (B("gfx90a", "bf16", 64, False, None, deterministic=True, n_q=37, n_k=45), False),
    (B("gfx90a", "fp16", 64, True, None, n_q=37, n_k=45), False),
    (B("gfx90a", "fp16", 64, False, None, n_q=45, n_k=37), False),
    (B("gfx90a", "fp16", 64, False, None, deterministic=True, batch=2, n_q=37, n_k=37), False),
    (B("gfx90a", "fp16", 64, False, "mfma:bm64:bn64:w2", n_q=100, n_k=130), False),
    (B("gfx90a", "bf16", 64, True, "mfma:bm64:bn64:w2", deterministic=True, n_q=70, n_k=40), False),
    (B("gfx90a", "bf16", 64, True, "mfma:bm32:bn128:w4", deterministic=True, heads_q=4, heads_kv=2, n_q=100, n_k=70), False),
    (B("gfx90a", "fp16", 64, False, "mfma:bm32:bn128:w4", batch=2, n_q=50, n_k=70), False),
    (B("gfx90a", "bf16", 128, True, "mfma:bm32:bn64:w2:c2", n_q=70, n_k=50), False),
    (B("gfx90a", "fp32", 64, True, None, heads_q=4, heads_kv=2, n_q=45, n_k=37), False),
    (B("gfx90a", "bf16", 64, False, "simt:w4:dmax64", n_q=30, n_k=41), False),
    # gfx950: simt only
    (B("gfx950", "fp32", 64, True, None, n_q=45, n_k=37), False),
    (B("gfx950", "fp16", 64, False, "simt:w4:dmax64", heads_q=4, heads_kv=2, n_q=30, n_k=41), False),
]


D = kd.DoubleBackwardCase
# (case, in the default subset). The double backward's general path (simt_q, simt_kv after the
# backward's preprocess; there is no MFMA double backward), dense and packed, at small odd shapes,
# causal and not, GQA, rows that see no key (causal n_q > n_k), cotangents left out. It covers the
# head-dim buckets dmax32 to dmax256, among them the kernels whose code the packed double backward's
# change moved (tests/replay/amd.tsv): gfx942 and gfx950 simt_kv at dmax32 (fp16, fp32), gfx90a
# simt_q at dmax128 and dmax256.
# A packed batch with a sequence of one key, gK left out; also run with the hazard probes.
DOUBLE_HAZARD_CASE = D("gfx942", "bf16", 32, False, None, absent="k", seqlens=((5, 9), (16, 1), (12, 12)))
DOUBLE_CASES = [
    (D("gfx942", "fp16", 32, True, None, heads_q=2, heads_kv=1, n_q=13, n_k=17), True),
    (D("gfx942", "fp16", 32, True, None, heads_q=4, heads_kv=2, n_q=19, n_k=23), False),
    (D("gfx942", "fp32", 32, False, None, batch=2, n_q=30, n_k=17), False),
    (D("gfx942", "bf16", 40, True, None, n_q=37, n_k=20), False),  # d in the dmax64 bucket; rows see no key
    (D("gfx942", "fp16", 128, False, None, heads_q=2, heads_kv=1, n_q=17, n_k=21), False),
    (D("gfx942", "bf16", 256, True, None, heads_q=1, heads_kv=1, n_q=9, n_k=11), False),
    (D("gfx942", "fp32", 64, False, None, absent="qv", n_q=21, n_k=26), False),
    (D("gfx942", "fp32", 64, True, None, heads_q=2, heads_kv=1, seqlens=((7, 3), (12, 15))), True),
    (D("gfx942", "fp32", 64, True, None, heads_q=4, heads_kv=2, seqlens=((7, 3), (20, 25), (33, 33))), False),
    (DOUBLE_HAZARD_CASE, False),
    (D("gfx950", "fp16", 32, True, None, n_q=25, n_k=18), True),
    (D("gfx950", "fp32", 32, False, None, heads_q=4, heads_kv=2, n_q=13, n_k=29), False),
    (D("gfx950", "bf16", 64, True, None, heads_q=2, heads_kv=1, seqlens=((11, 17), (29, 8))), False),
    (D("gfx950", "fp16", 104, False, None, n_q=15, n_k=12), False),
    (D("gfx90a", "fp16", 128, True, None, heads_q=4, heads_kv=2, n_q=21, n_k=15), False),
    (D("gfx90a", "fp32", 96, False, None, n_q=11, n_k=19), False),
    (D("gfx90a", "bf16", 256, False, None, heads_q=1, heads_kv=1, n_q=7, n_k=10), False),
    (D("gfx90a", "fp16", 64, True, None, absent="v", seqlens=((9, 14), (18, 6))), False),
]
# The rest of the 20 kernels the packed double backward's change moved, at tiny shapes: gfx942 and
# gfx950 simt_kv at dmax32 (fp16 full, fp32 causal), gfx90a simt_q at dmax128 and dmax256 (each
# dtype and mask the cases above leave out).
MOVED = [(a, t, 32, c) for a in ("gfx942", "gfx950") for t, c in (("fp16", False), ("fp32", True))]
MOVED += [("gfx90a", t, d, c) for t, d, c in (("fp16", 128, False), ("bf16", 128, True), ("bf16", 128, False),
                                              ("fp32", 128, True), ("fp16", 256, True), ("fp16", 256, False),
                                              ("bf16", 256, True), ("fp32", 256, True), ("fp32", 256, False))]
DOUBLE_CASES += [(D(a, t, d, c, None, heads_q=2, heads_kv=1, n_q=9, n_k=7), False) for a, t, d, c in MOVED]


def _mfma_specs() -> set:
    """(arch, op, dtype, head dim, mask) of every spec with an MFMA kernel in tests/replay/amd.tsv
    (each such spec's default is an MFMA config: generator/attention_mfma.cpp)."""
    specs = set()
    with open(os.path.join(kd.REPO, "tests", "replay", "amd.tsv")) as f:
        for line in f:
            arch, op, variant = line.split("\t")[:3]
            if op in ("attention_fwd", "attention_bwd") and "mfma" in variant:
                _, dtype, d, mask = variant.split(".")[:4]
                specs.add((arch, op, dtype, int(d[1:]), mask == "causal"))
    return specs


def test_every_mfma_default_has_a_case():
    """Every MFMA default of gfx942 and gfx90a (each spec the MFMA path serves; the backward in both
    modes) has an emulator case. gfx950's need the 32x32x16 MFMAs, which have no layout source yet
    (tools/amdemu/README.md, Limits): there the tier checks only that every other instruction is known
    (test_every_instruction_known)."""
    have = {(c.arch, "attention_fwd", c.dtype, c.head_dim, c.causal) for c, _ in FORWARD_CASES if c.config is None}
    have |= {(c.arch, "attention_bwd", c.dtype, c.head_dim, c.causal, c.deterministic)
             for c, _ in BACKWARD_CASES if c.config is None}
    specs = _mfma_specs()
    assert len(specs) == 48, "the MFMA path serves other specs now: add their cases"
    want = {s for s in specs if s[1] == "attention_fwd" and s[0] != "gfx950"}
    want |= {s + (mode,) for s in specs if s[1] == "attention_bwd" and s[0] != "gfx950" for mode in (False, True)}
    assert not want - have, f"MFMA defaults without an emulator case: {sorted(want - have)}"


def _skip_reason():
    return kd.missing_tools(KGEN_BIN)


@pytest.mark.parametrize("case", [c for c, default in FORWARD_CASES if default or ALL], ids=lambda c: c.name)
def test_forward(case):
    _passes(kd.run_forward, case)


def _passes(run, case):
    """`run(kgen, case)` finds no error (docs/attention.md §5.2 on every output)."""
    why = _skip_reason()
    if why:
        pytest.skip(why)
    r = run(KGEN_BIN, case)
    kernels = f" ({', '.join(r['kernels'])})" if "kernels" in r else ""
    assert not r["errors"], f"{r['variant']}{kernels} on {case.name}: " + "; ".join(r["errors"])


@pytest.mark.parametrize("case", [c for c, default in BACKWARD_CASES if default or ALL], ids=lambda c: c.name)
def test_backward(case):
    _passes(kd.run_backward, case)


@pytest.mark.parametrize("case", [c for c, default in DOUBLE_CASES if default or ALL], ids=lambda c: c.name)
def test_double_backward(case):
    _passes(kd.run_double_backward, case)


def test_double_backward_reference_is_the_gradient():
    """The float64 double backward reference against central differences of
    L = ⟨gQ, dQ⟩ + ⟨gK, dK⟩ + ⟨gV, dV⟩ (the backward reference's) in q, k, v and dO (causal, GQA, a
    row that sees no key)."""
    rng = np.random.default_rng(5)
    q, do, gq = rng.standard_normal((3, 1, 2, 5, 4))
    k, v, gk, gv = rng.standard_normal((4, 1, 1, 3, 4))
    scale = 0.7

    def loss():
        return sum(np.sum(g * x) for g, x in zip((gq, gk, gv), kd.attention_backward_reference(q, k, v, do, True, scale)))
    grads = kd.attention_double_backward_reference(q, k, v, do, gq, gk, gv, True, scale)
    h = 1e-6
    for x, g in zip((q, k, v, do), grads):
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + h
            up = loss()
            x[idx] = old - h
            down = loss()
            x[idx] = old
            assert abs((up - down) / (2 * h) - g[idx]) < 1e-6


# Issue 50's gfx942 cases again with the emulator's hazard probes (waves in reverse order between
# barriers, VGPRs/AGPRs/LDS NaN before their first write): a missing barrier or a read before a
# write would change the bits.
HAZARD_CASES = ISSUE_CASES + [BACKWARD_CASES[2][0]] + GFX90A_D128_CASES  # and rows that see no key, GQA


@pytest.mark.parametrize("case", HAZARD_CASES if ALL else [], ids=lambda c: c.name)
def test_backward_hazards(case):
    _same_bits_under_probes(kd.run_backward, case)


def _same_bits_under_probes(run, case):
    """`run(kgen, case, hazards)` passes with the hazard probes and gives the same bits as without."""
    why = _skip_reason()
    if why:
        pytest.skip(why)
    plain = run(KGEN_BIN, case)
    probed = run(KGEN_BIN, case, hazards=True)
    assert not probed["errors"], f"{probed['variant']} on {case.name} with hazard probes: " + "; ".join(probed["errors"])
    for name, out in plain["out"].items():
        assert np.array_equal(out, probed["out"][name]), f"{name} changes under the hazard probes"


@pytest.mark.parametrize("case", [DOUBLE_HAZARD_CASE] if ALL else [], ids=lambda c: c.name)
def test_double_backward_hazards(case):
    """A packed double backward with the hazard probes (registers and LDS NaN before their first
    write, waves in reverse order): the same bits."""
    _same_bits_under_probes(kd.run_double_backward, case)


def _synthetic_exchange(barrier: bool, probes: bool):
    """Two waves each write their lanes' LDS slots, then read the other wave's (128 threads: slot
    tid ^ 64) and store them to out[tid]; with or without an s_barrier between."""
    from codeobject import KernelDescriptor
    body = ["s_load_dwordx2 s[2:3], s[0:1], 0x0", "v_lshlrev_b32_e32 v1, 2, v0", "v_add_u32_e32 v2, 1, v0",
            "ds_write_b32 v1, v2", "s_waitcnt lgkmcnt(0)"] + (["s_barrier"] if barrier else []) + \
           ["v_xor_b32_e32 v3, 0x100, v1", "ds_read_b32 v4, v3", "s_waitcnt lgkmcnt(0)",
            "global_store_dword v1, v4, s[2:3]", "s_endpgm"]
    ins = [parse_line(f"\t{t} // {0x1000 + 8 * i:012X}: 00000000 00000000") for i, t in enumerate(body)]
    kd_ = KernelDescriptor(group_segment_fixed_size=512, private_segment_fixed_size=0, kernarg_size=8,
                           kernel_code_entry_byte_offset=0, compute_pgm_rsrc3=0, compute_pgm_rsrc1=0,
                           compute_pgm_rsrc2=2 << 1, kernel_code_properties=1 << 3, kernarg_preload=0)
    mem = emu.Memory()
    out = mem.alloc(128 * 4)
    args = mem.alloc(8)
    mem.put(args, np.array([out], np.uint64))
    d = emu.Dispatch(mem, ins, kd_, "gfx942")
    d.reverse = d.poison = probes
    d.run((1, 1, 1), (128, 1, 1), args)
    return mem.get(out, 128 * 4).view(np.uint32)


def test_hazard_probes_catch_a_missing_barrier():
    """The probes of test_backward_hazards can fail: without the barrier the exchange's result
    depends on the wave order, with it the bits are the same both ways and right."""
    assert not np.array_equal(_synthetic_exchange(False, False), _synthetic_exchange(False, True))
    want = (np.arange(128) ^ 64) + 1
    assert np.array_equal(_synthetic_exchange(True, False), want)
    assert np.array_equal(_synthetic_exchange(True, True), want)


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


def _run_one(text, w, ctx=None):
    emu.compile_instruction(parse_line(f"\t{text} // 000000001600: 00000000 00000000"), None, ctx)(w)


def test_gfx90a_instructions():
    """What gfx90a's kernels use and gfx942's do not: v_pk_mov_b32, 16-bit integer ops (bits 31:16
    zeroed, GFX9), signed 24-bit multiplies, a returning compare-and-swap in lane order."""
    w = emu.Wave(None, 0)
    w.set_s64(emu.EXEC, (1 << 64) - 1)
    w.s[4:8] = [11, 12, 13, 14]
    _run_one("v_pk_mov_b32 v[2:3], s[4:5], s[6:7] op_sel:[1,0]", w)
    assert (w.v[2] == 12).all() and (w.v[3] == 13).all()
    w.v[0] = 0xABCDFFF0  # bits 15:0 = -16
    _run_one("v_ashrrev_i16_e32 v1, 2, v0", w)
    assert (w.v[1] == 0xFFFC).all()
    _run_one("v_lshrrev_b16_sdwa v1, 2, sext(v0) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_0", w)
    assert (w.v[1] == 0x3FFC).all()
    _run_one("v_sub_u16_e32 v1, 1, v0", w)
    assert (w.v[1] == 0x0011).all()
    w.v[2], w.v[3] = 0x00FFFFFF, 7  # -1 as i24
    _run_one("v_mad_i32_i24 v1, v2, -4, v3", w)
    assert (w.v[1] == 11).all()

    class Ctx:
        memory = emu.Memory()
    cell = Ctx.memory.alloc(4)
    Ctx.memory.put(cell, np.array([5], np.uint32))
    w.v[20], w.v[21] = cell & 0xFFFFFFFF, cell >> 32
    w.v[22] = np.arange(64, dtype=np.uint32) + 100  # new values
    w.v[23] = np.where(np.arange(64) == 3, 5, 0).astype(np.uint32)  # compare: lane 3 matches
    w.v[23][7] = 103  # and lane 7 matches what lane 3 stored
    _run_one("global_atomic_cmpswap v24, v[20:21], v[22:23], off glc", w, Ctx)
    assert Ctx.memory.get(cell, 4).view(np.uint32)[0] == 107
    assert list(w.v[24][[0, 3, 4, 7, 8]]) == [5, 5, 103, 103, 107]


def test_dot2c_f32():
    """gfx950's forward sums its rounded probabilities a pair at a time with v_dot2c_f32_bf16 and
    _f16 against (1, 1): D = S0[15:0]·S1[15:0] + S0[31:16]·S1[31:16] + D."""
    w = emu.Wave(None, 0)
    w.set_s64(emu.EXEC, (1 << 64) - 1)
    w.v[3] = 0x3F404000  # bf16 (2.0, 0.75)
    w.v[0] = np.float32(0.5).view(np.uint32)
    _run_one("v_dot2c_f32_bf16_e32 v0, 0x3f803f80, v3", w)
    assert (w.v[0].view(np.float32) == 3.25).all()
    w.v[4] = 0x3A004400  # fp16 (4.0, 0.75)
    w.v[1] = np.float32(-1.0).view(np.uint32)
    _run_one("v_dot2c_f32_f16_e32 v1, 0x3c003c00, v4", w)
    assert (w.v[1].view(np.float32) == 3.75).all()


def test_ds_write_b16_d16_hi():
    """gfx950's kv_atomic kernel writes the upper half of a packed pair with ds_write_b16_d16_hi:
    the 16 bits of DATA[31:16] at the address, the bytes beside them untouched."""
    w = emu.Wave(emu.Workgroup(4 * 64 + 4), 0)
    w.set_s64(emu.EXEC, (1 << 64) - 1)
    w.v[1] = np.arange(64, dtype=np.uint32) * 4  # addresses
    w.v[2] = (np.arange(64, dtype=np.uint32) << 16) | 0xBEEF
    _run_one("ds_write_b16_d16_hi v1, v2 offset:2", w)
    got = w.wg.lds[:256].view(np.uint16).reshape(64, 2)
    assert (got[:, 0] == 0).all() and (got[:, 1] == np.arange(64)).all()


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


# Instruction budgets (tools/amdemu/budgets.py, tests/amdemu/instruction_budgets.json): gfx942's
# bf16 d = 128 forward and atomic backward by default, every budgeted variant with KGEN_AMDEMU_ALL=1.
BUDGET_DEFAULT = {("gfx942", "attention_fwd.bf16.d128.full"), ("gfx942", "attention_bwd.bf16.d128.causal")}


@pytest.mark.parametrize("variant", [v for v in budgets.VARIANTS if ALL or (v.arch, v.variant) in BUDGET_DEFAULT],
                         ids=lambda v: f"{v.arch}.{v.variant}")
def test_instruction_budget(variant):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    stored = {budgets.key(r): r for r in budgets.load_budgets()["kernels"]}
    errs = []
    for row in budgets.measure(KGEN_BIN, variant):
        b = stored.get(budgets.key(row))
        if b is None:
            errs.append(f"{budgets.key(row)}: no budget")
        elif b["compiler"] != row["compiler"]:
            pytest.skip(f"{budgets.key(row)}: budgeted for {b['compiler']}, built by {row['compiler']}")
        else:
            errs += [f"{budgets.key(row)}: {e}" for e in budgets.over_budget(row["counts"], b["counts"])]
    assert not errs, "; ".join(errs) + " (an intended change rewrites the budgets: tools/amdemu/budgets.py --update)"


def test_budget_counts_catch_a_longer_loop():
    """The main loop is the backward branch with the most MFMAs; one more instruction in it moves
    its counts, and a count past its budget's slack fails."""
    lines = ["s_mov_b32 s0, 0", "v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]", "v_add_f32_e32 v4, v4, v5",
             "s_cbranch_scc1 65532", "s_endpgm"]  # back to the MFMA: 4 + 4·(-4) bytes
    ins, addr = [], 0x1000
    for text in lines:
        size = 8 if text.startswith("v_mfma") else 4
        ins.append(parse_line(f"\t{text} // {addr:012X}: " + " ".join(["00000000"] * (size // 4))))
        addr += size
    c = budgets.counts(ins)
    assert (c["loop_instructions"], c["loop_mfma"], c["loop_non_mfma_per_mfma"]) == (3, 1, 2.0)
    assert not budgets.over_budget(c, c)
    assert budgets.over_budget(dict(c, loop_instructions=6), c)
