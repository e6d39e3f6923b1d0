"""GPU tests of kgen.torch.flex_attention: FlexAttention callables (test_flex_trace.py's) run by kgen
against a float64 reference that applies the same callables as FlexAttention does (vmapped over
the indices), with test_variant_gpu.py's checks and tolerances: o and lse by the pass rule of
docs/attention.md §5.2 with the row rule, kgen's error against PyTorch FlexAttention's on the same
inputs, and the gradients of q, k, v and of learnable captured tensors against float64 autograd.
Skipped unless PyTorch with CUDA and libkgen.so are available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from test_flex_trace import (callable_on_grid, causal, causal_score, floor_semantics, make_alibi,  # noqa: E402
                             make_document_mask, make_relative_bias, make_softcap, make_t5, prefix_lm,
                             sliding_window)
from test_variant_gpu import (BATCH, DEVICE, DTYPES, FLEX_FLOOR, HEADS_KV, HEADS_Q, REL_L2_BOUND,  # noqa: E402
                              SUM_BOUND, Case, check, check_gradient, flex_attention, randn, reference,
                              reference_gradients, _documents, _generator)

pytestmark = pytest.mark.usefixtures("kgen_library")
SHAPES = [(100, 300), (257, 257)]


def _table(*shape, seed, scale=0.5):
    return scale * torch.randn(*shape, generator=_generator(seed), device=DEVICE)


def make_flex_case(name, n_q, n_k):
    """(score_mod factory, mask_mod, tensors): the factory takes the tensors by name, so that the
    reference applies the same callable to their float64 leaves."""
    h = HEADS_Q
    if name == "causal":
        return None, causal, {}
    if name == "sliding_window":
        return None, sliding_window, {}
    if name == "prefix_lm":
        return None, prefix_lm, {}
    if name == "document":
        doc = _documents(1, n_k, n_q + n_k)[0].long()  # int64, converted by kgen per call
        return None, make_document_mask(doc), {}
    if name == "alibi":
        return (lambda slopes: make_alibi(slopes)), None, {"slopes": _table(h, seed=1, scale=0.1)}
    if name == "softcap":
        return (lambda: make_softcap(30.0)), None, {}
    if name == "relative_bias":
        return (lambda rel: make_relative_bias(rel, offset=n_k - 1)), causal, {"rel": _table(h, n_q + n_k, seed=2)}
    if name == "t5_buckets":
        return (lambda weights: make_t5(weights)), None, {"weights": _table(h, 7, seed=3)}
    if name == "causal_score":
        return (lambda: causal_score), None, {}
    if name == "floor_semantics":
        return (lambda: floor_semantics), None, {}
    if name == "softcap_document":
        doc = _documents(1, n_k, 2 * n_k)[0].int()
        return (lambda: make_softcap(20.0)), make_document_mask(doc), {}
    raise ValueError(name)


CASES = ["causal", "sliding_window", "prefix_lm", "document", "alibi", "softcap", "relative_bias", "t5_buckets",
         "causal_score", "floor_semantics", "softcap_document"]


def reference_case(factory, mask_mod, tensors) -> Case:
    """test_variant_gpu's Case applying the callables on the reference's grids (t: the tensors,
    float64 copies or leaves)."""
    def score(s, b, h, q, k, t):
        return callable_on_grid("score_mod", factory(**t), s, s.shape)

    def mask(b, h, q, k, t):
        sizes = (b.shape[0], h.shape[1], q.shape[2], k.shape[3])
        return callable_on_grid("mask_mod", mask_mod, q, sizes)
    return Case({}, score=score if factory is not None else None, mask=mask if mask_mod is not None else None,
                tensors=tensors)


def inputs(dtype, n_q, n_k, d, seed, requires_grad=False):
    q = randn((BATCH, HEADS_Q, n_q, d), dtype, seed)
    k, v = (randn((BATCH, HEADS_KV, n_k, d), dtype, seed + i) for i in (1, 2))
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


@pytest.mark.parametrize("n_q,n_k", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", CASES)
def test_flex_forward(name, dtype, n_q, n_k):
    """o and lse against the float64 reference; kgen's max-abs error on o at most 1.5x PyTorch
    FlexAttention's on the same inputs and callables (plus test_variant_gpu's floor)."""
    factory, mask_mod, tensors = make_flex_case(name, n_q, n_k)
    d = 64
    q, k, v = inputs(dtype, n_q, n_k, d, seed=n_q + 7)
    score_mod = None if factory is None else factory(**tensors)
    o, lse = kgen.torch.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True,
                                       return_lse=True)
    torch.cuda.synchronize()
    case = reference_case(factory, mask_mod, tensors)
    o_ref, lse_ref = reference(q, k, v, case, d ** -0.5)
    check(o, lse, o_ref, lse_ref, dtype, f"{name} {dtype} {n_q}x{n_k}")
    functions = flex_attention()
    if functions is None:
        return
    torch._dynamo.reset()  # each case's closures as constants
    block_mask = None if mask_mod is None else functions[2](mask_mod, BATCH, HEADS_Q, n_q, n_k, device=DEVICE)
    # fp32: eager FlexAttention only (inductor's fp32 FlexAttention kernels did not compile in 270 s)
    runs = functions[1:2] if dtype == torch.float32 else functions[:2]
    o_flex = torch_flex(runs, q, k, v, score_mod=score_mod, block_mask=block_mask, scale=d ** -0.5,
                        enable_gqa=True)
    errors = [float((out.double() - o_ref).abs().max()) for out in (o, o_flex)]
    assert errors[0] <= 1.5 * errors[1] + FLEX_FLOOR[dtype], \
        f"{name} {dtype}: kgen's max-abs error {errors[0]:.2e}, FlexAttention's {errors[1]:.2e}"


def torch_flex(runs, q, k, v, **kwargs):
    """PyTorch FlexAttention's o: compiled, else eager where this build does not compile the case;
    the test skips where neither runs it."""
    failure = None
    for run in runs:
        try:
            out = run(q, k, v, **kwargs)
            torch.cuda.synchronize()
            return out
        except Exception as e:  # noqa: BLE001 - the next form, or the skip below
            failure = e
    pytest.skip(f"FlexAttention does not run this case: {type(failure).__name__}: {failure}")


def test_block_mask_is_its_mask_mod():
    """A BlockMask from create_block_mask gives what its mask_mod passed as mask_mod gives."""
    q, k, v = inputs(torch.bfloat16, 257, 257, 64, seed=3)
    functions = flex_attention()
    if functions is None:
        pytest.skip("torch.nn.attention.flex_attention is not available")
    block_mask = functions[2](sliding_window, None, None, 257, 257, device=DEVICE)
    a = kgen.torch.flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    b = kgen.torch.flex_attention(q, k, v, mask_mod=sliding_window, enable_gqa=True)
    assert torch.equal(a, b)


# (case, dtype, (n_q, n_k), names of the captured tensors that learn)
GRADIENT_CASES = [
    ("relative_bias", torch.bfloat16, (257, 257), ("rel",)),
    ("relative_bias", torch.float32, (100, 300), ("rel",)),
    ("t5_buckets", torch.float16, (100, 300), ("weights",)),
    ("alibi", torch.float32, (257, 257), ("slopes",)),
    ("causal_score", torch.bfloat16, (257, 257), ()),
    ("softcap_document", torch.float16, (100, 300), ()),
    ("floor_semantics", torch.bfloat16, (100, 300), ()),
]


@pytest.mark.parametrize("c", GRADIENT_CASES, ids=[f"{c[0]}-{str(c[1])[6:]}-{c[2][0]}x{c[2][1]}" for c in GRADIENT_CASES])
def test_flex_gradients(c):
    """dq, dk, dv and the learnable tensors' gradients against float64 autograd through the
    reference (GQA 4: dk and dv sum over each kv group)."""
    name, dtype, (n_q, n_k), learn = c
    factory, mask_mod, tensors = make_flex_case(name, n_q, n_k)
    leaves = {t: tensors[t].detach().clone().requires_grad_() for t in learn}
    d = 64
    q, k, v = inputs(dtype, n_q, n_k, d, seed=5 * n_q + 1, requires_grad=True)
    r = randn(q.shape, dtype, 99)
    score_mod = None if factory is None else factory(**{**tensors, **leaves})
    o = kgen.torch.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True)
    got = torch.autograd.grad((o.float() * r.float()).sum(), [q, k, v, *leaves.values()])
    torch.cuda.synchronize()
    case = reference_case(factory, mask_mod, tensors)
    ref, ref_leaves = reference_gradients(q, k, v, r, case, d ** -0.5, leaves)
    what = f"{name} {dtype} {n_q}x{n_k}"
    for grad_name, a, e in zip(("dq", "dk", "dv"), got[:3], ref):
        check_gradient(grad_name, a, e, REL_L2_BOUND[dtype], True, what)
    for (leaf, a), e in zip(zip(leaves, got[3:]), ref_leaves.values()):
        assert a.shape == leaves[leaf].shape and not math.isnan(float(a.sum()))
        check_gradient(f"d{leaf}", a, e, SUM_BOUND[dtype], False, what)
