"""kgen.torch.flex_attention without a GPU: the tracer of FlexAttention callables (the exact kgen
expression of each, its declared tensors and scalars, the library's parser accepting it through
the C API's validation, and the same values as the callable on every (b, h, q, kv) of a grid
under an evaluator of the language written here), the errors of what falls outside the language,
the trace cache, and the calls kgen.torch makes (variant, return_lse, gradients) through the
stand-in library of test_variant_args.py."""
import math
import re
import warnings

import pytest

torch = pytest.importorskip("torch")

import kgen.torch  # noqa: E402
from kgen import flex  # noqa: E402
from kgen.flex import FlexTraceError  # noqa: E402
from test_variant_args import GRAD, calls, library_variant, passes_validation, spec  # noqa: E402,F401

flex_api = pytest.importorskip("torch.nn.attention.flex_attention")

B, H, NQ, NK = 2, 4, 37, 53  # n_q != n_k: the indices are plain row indices
W, PREFIX, OFFSET = 8, 5, NK - 1
SUPPORTED = "(supported: where, tanh, exp, log, sigmoid, sqrt, abs, minimum, maximum, clamp)"


def _documents():
    g = torch.Generator().manual_seed(1)
    return torch.sort(torch.randint(0, 4, (NK,), generator=g)).values  # int64, as FlexAttention users build them


GLOBAL_BIAS = torch.randn(H, NQ + NK, generator=torch.Generator().manual_seed(2))


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= W)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX) | (q_idx >= kv_idx)


def make_document_mask(doc):
    def document_mask(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]
    return document_mask


def make_alibi(slopes):
    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return alibi


def make_softcap(softcap):
    def tanh_softcap(score, b, h, q_idx, kv_idx):
        return softcap * torch.tanh(score / softcap)
    return tanh_softcap


def make_relative_bias(rel, chained=False, offset=OFFSET):
    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + offset]

    def relative_bias_chained(score, b, h, q_idx, kv_idx):
        return score + rel[h][q_idx - kv_idx + offset]
    return relative_bias_chained if chained else relative_bias


def make_t5(weights):
    def t5_buckets(score, b, h, q_idx, kv_idx):
        d = (q_idx - kv_idx).abs()
        bucket = torch.where(d < 4, d, torch.where(d < 8, 4, torch.where(d < 16, 5, 6)))
        return score + weights[h, bucket]
    return t5_buckets


def causal_score(score, b, h, q_idx, kv_idx):
    return torch.where(q_idx >= kv_idx, score, -float("inf"))


def masked_scaled(score, b, h, q_idx, kv_idx):
    return torch.where(q_idx < kv_idx, -math.inf, torch.where(kv_idx < 3, score * 2.0, score))


def floor_semantics(score, b, h, q_idx, kv_idx):
    return score + ((q_idx - kv_idx) // 7) * 0.25 + (q_idx - kv_idx) % 3


def functions(score, b, h, q_idx, kv_idx):
    near = torch.clamp(q_idx - kv_idx, min=-4, max=4).float() * 0.5
    return score * torch.sigmoid(score) + near + torch.sqrt(torch.exp(torch.minimum(score, torch.zeros_like(score)))) \
        - torch.log(1.0 + (kv_idx / 2).abs()) + torch.maximum(kv_idx, h).to(torch.float32) / 16


def global_bias(score, b, h, q_idx, kv_idx):
    return score + GLOBAL_BIAS[h, q_idx + kv_idx]


def make_temperature(temperature):
    def temperature_scaled(score, b, h, q_idx, kv_idx):
        return score * temperature
    return temperature_scaled


def make_allowed(allowed):
    def allowed_mask(b, h, q_idx, kv_idx):
        return allowed[q_idx, kv_idx] & ~(kv_idx == 0)
    return allowed_mask


class HeadBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(H, generator=torch.Generator().manual_seed(3)))

    def score_mod(self, score, b, h, q_idx, kv_idx):
        return score + self.bias[h] * (b + 1)


def _tensor(*shape, seed=4, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# (id, role, callable, score_mod text, mask_mod text, {declared name: tensor dtype or "real"})
CASES = [
    ("causal", "mask_mod", causal, None, "(q>=k)", {}),
    ("sliding_window", "mask_mod", sliding_window, None, "((q>=k)&&((q-k)<=8))", {}),
    ("prefix_lm", "mask_mod", prefix_lm, None, "((k<5)||(q>=k))", {}),
    ("document", "mask_mod", make_document_mask(_documents()), None, "(doc[q]==doc[k])", {"doc": torch.int32}),
    ("and_masks", "mask_mod", flex_api.and_masks(causal, sliding_window, prefix_lm), None,
     "(((q>=k)&&((q>=k)&&((q-k)<=8)))&&((k<5)||(q>=k)))", {}),
    ("bool_table", "mask_mod", make_allowed(torch.rand(NQ, NK, generator=torch.Generator().manual_seed(5)) > 0.3),
     None, "((allowed[q][k]!=0)&&(!(k==0)))", {"allowed": torch.int32}),
    ("alibi", "score_mod", make_alibi(_tensor(H)), "(score+(slopes[h]*(k-q)))", None, {"slopes": torch.float32}),
    ("softcap", "score_mod", make_softcap(20.0), "(softcap*tanh((score/softcap)))", None, {"softcap": "real"}),
    ("relative_bias", "score_mod", make_relative_bias(_tensor(H, NQ + NK)), "(score+rel[h][((q-k)+52)])", None,
     {"rel": torch.float32}),
    ("relative_bias_chained", "score_mod", make_relative_bias(_tensor(H, NQ + NK), True),
     "(score+rel[h][((q-k)+52)])", None, {"rel": torch.float32}),
    ("t5_buckets", "score_mod", make_t5(_tensor(H, 7)),
     "(score+weights[h][where((abs((q-k))<4),abs((q-k)),where((abs((q-k))<8),4,where((abs((q-k))<16),5,6)))])",
     None, {"weights": torch.float32}),
    ("causal_score", "score_mod", causal_score, None, "(q>=k)", {}),
    ("masked_scaled", "score_mod", masked_scaled, "where((k<3),(score*2.0),score)", "(!(q<k))", {}),
    ("floor_semantics", "score_mod", floor_semantics,
     "((score+((((q-k)/7)-where(((((q-k)%7)!=0)&&(((q-k)%7)<0)),1,0))*0.25))"
     "+where(((((q-k)%3)!=0)&&(((q-k)%3)<0)),(((q-k)%3)+3),((q-k)%3)))", None, {}),
    ("functions", "score_mod", functions,
     "(((((score*sigmoid(score))+(float(min(max((q-k),(-4)),4))*0.5))+sqrt(exp(min(score,0.0))))"
     "-log((1.0+abs((float(k)/2)))))+(float(max(k,h))/16))", None, {}),
    ("global_tensor", "score_mod", global_bias, "(score+GLOBAL_BIAS[h][(q+k)])", None, {"GLOBAL_BIAS": torch.float32}),
    ("zero_dim_tensor", "score_mod", make_temperature(torch.tensor(0.7)), "(score*temperature[0])", None,
     {"temperature": torch.float32}),
    ("bound_method", "score_mod", HeadBias().score_mod, "(score+(t0[h]*(b+1)))", None, {"t0": torch.float32}),
]
IDS = [c[0] for c in CASES]


def traced(role, fn):
    """(score_mod text, mask_mod text, {name: (input, value)}) of one callable as flex_attention
    traces it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = flex._trace(role, fn)
    score, mask, declared = flex._declarations((trace,) if role == "score_mod" else (None, trace))
    return score, mask, {name: (source, flex._value(source, fn)) for name, source, _ in declared}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_traced_text(case):
    _, role, fn, score_text, mask_text, declared = case
    score, mask, inputs = traced(role, fn)
    assert (score, mask) == (score_text, mask_text)
    assert {name: v.dtype if s.tensor else "real" for name, (s, v) in inputs.items()} == declared


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_library_parses_the_trace(case, kgen_library):
    """The C API's validation (the parse included) accepts every traced variant: it fails only
    where it needs a device."""
    _, role, fn, *_ = case
    score, mask, inputs = traced(role, fn)
    fields = {"score_mod": score, "mask_mod": mask}
    fields = {name: text for name, text in fields.items() if text is not None}
    scalars = {name: v for name, (s, v) in inputs.items() if not s.tensor}
    tensors = {name: spec(v.shape, str(v.dtype)[6:]) for name, (s, v) in inputs.items() if s.tensor}
    if scalars:
        fields["scalars"] = scalars
    if tensors:
        fields["tensors"] = tensors
    variant, keep = library_variant(fields)
    passes_validation(variant)


# --- the language's values on a grid, against the callable's ------------------------------------------

TOKEN = re.compile(r"\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|[A-Za-z_]\w*|&&|\|\||[<>=!]=|[-+*/%<>!()\[\],]")


class Evaluator:
    """kgen's expression language (docs/attention.md §8) on torch tensors of (b, h, q, k) grids:
    integers int64 with C's truncating / and %, reals float64."""

    LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]

    def __init__(self, text, env):
        self.tokens, self.i, self.env = TOKEN.findall(text), 0, env
        assert "".join(self.tokens) == text, text

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected=None):
        token = self.tokens[self.i]
        assert expected is None or token == expected, (token, expected)
        self.i += 1
        return token

    def run(self):
        value = self.level(0)
        assert self.peek() is None
        return value

    def level(self, n):
        if n == len(self.LEVELS):
            return self.unary()
        value = self.level(n + 1)
        while self.peek() in self.LEVELS[n]:
            value = self.binary(self.take(), value, self.level(n + 1))
        return value

    @staticmethod
    def binary(op, a, b):
        integers = not a.is_floating_point() and not b.is_floating_point()
        if op == "/":
            return torch.div(a, b, rounding_mode="trunc") if integers else a / b
        if op == "%":
            return torch.fmod(a, b)
        return {"||": torch.logical_or, "&&": torch.logical_and, "==": torch.eq, "!=": torch.ne, "<": torch.lt,
                "<=": torch.le, ">": torch.gt, ">=": torch.ge, "+": torch.add, "-": torch.sub, "*": torch.mul}[op](a, b)

    def unary(self):
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "!":
            self.take()
            return ~self.unary()
        return self.primary()

    def primary(self):
        token = self.take()
        if token == "(":
            value = self.level(0)
            self.take(")")
            return value
        if token[0].isdigit():
            return torch.tensor(float(token) if re.search(r"[.eE]", token) else int(token),
                                dtype=torch.float64 if re.search(r"[.eE]", token) else torch.int64)
        if self.peek() == "(":
            self.take()
            args = [self.level(0)]
            while self.peek() == ",":
                self.take()
                args.append(self.level(0))
            self.take(")")
            return self.call(token, args)
        value = self.env[token]
        if self.peek() == "[":
            indices = []
            while self.peek() == "[":
                self.take()
                indices.append(self.level(0))
                self.take("]")
            value = value[tuple(indices)]
            value = value.double() if value.is_floating_point() else value.long()
        return value

    @staticmethod
    def call(name, args):
        if name == "where":
            a, b = args[1:]
            if a.dtype != b.dtype and torch.bool not in (a.dtype, b.dtype):
                a, b = a.double(), b.double()
            return torch.where(args[0], a, b)
        if name in ("min", "max"):
            a, b = args
            if a.dtype != b.dtype:
                a, b = a.double(), b.double()
            return (torch.minimum if name == "min" else torch.maximum)(a, b)
        if name == "abs":
            return args[0].abs()
        if name == "float":
            return args[0].double()
        return getattr(torch, name)(args[0].double())


def grids():
    return (torch.arange(B)[:, None, None, None], torch.arange(H)[None, :, None, None],
            torch.arange(NQ)[None, None, :, None], torch.arange(NK)[None, None, None, :])


def callable_on_grid(role, fn, score, sizes=(B, H, NQ, NK)):
    """The callable at every (b, h, q, kv) of `sizes`, as FlexAttention applies it: vmapped over
    0-dim int32 indices (on score's device)."""
    arange = [torch.arange(n, dtype=torch.int32, device=score.device) for n in sizes]
    if role == "score_mod":
        f = fn
        for dim in (4, 3, 2, 1):
            in_dims = [None] * 5
            in_dims[0] = in_dims[dim] = 0
            f = torch.vmap(f, in_dims=tuple(in_dims))
        return f(score, *arange)
    f = fn
    for dim in (3, 2, 1, 0):
        in_dims = [None] * 4
        in_dims[dim] = 0
        f = torch.vmap(f, in_dims=tuple(in_dims))
    return f(*arange).expand(*sizes)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_trace_evaluates_as_the_callable(case):
    _, role, fn, *_ = case
    score_text, mask_text, inputs = traced(role, fn)
    score = torch.randn(B, H, NQ, NK, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    b, h, q, k = grids()
    env = {"score": score, "b": b, "h": h, "q": q, "k": k, "n_q": torch.tensor(NQ), "n_k": torch.tensor(NK)}
    env.update({name: torch.tensor(v) if not s.tensor else v for name, (s, v) in inputs.items()})
    expected = callable_on_grid(role, fn, score)
    mask = Evaluator(mask_text, env).run().expand(B, H, NQ, NK) if mask_text else torch.ones(B, H, NQ, NK, dtype=bool)
    if role == "mask_mod":
        assert torch.equal(mask, expected)
        return
    value = Evaluator(score_text, env).run() if score_text else score
    got = torch.where(mask, value.expand(B, H, NQ, NK).double(), -math.inf)
    torch.testing.assert_close(got, expected.double(), rtol=1e-6, atol=1e-6)


# --- what falls outside the language ------------------------------------------------------------------

def _if_score(score, b, h, q_idx, kv_idx):
    if score > 0:
        return score
    return -score


TABLE = torch.randn(H, 4)
INDICES = torch.tensor([0, 1, 2])
BIG = torch.zeros(1, 1, 1, 1, 2)


def outside(construct, hint=SUPPORTED, role="score_mod"):
    return f"{role}: {construct} is outside kgen's expression language {hint}"


ERRORS = [
    ("erf", lambda s, b, h, q, kv: torch.erf(s), outside("torch.erf")),
    ("if", _if_score, outside("Python control flow on a traced value (if, while, and, or, not, bool(), Python's "
                              "min/max)", "(use torch.where, &, |, ~, torch.minimum, torch.maximum)")),
    ("python_max", lambda s, b, h, q, kv: max(s, 0.0), None),
    ("and", lambda s, b, h, q, kv: s if (q > 0 and kv > 0) else s, None),
    ("item", lambda s, b, h, q, kv: s + q.item(), outside(".item()", "(a traced value is an expression, with no "
                                                                    "Python value)")),
    ("math_exp", lambda s, b, h, q, kv: math.exp(s), outside("float() of a traced value (math functions, Python "
                                                              "numbers)", "(use torch functions: supported: where, "
                                                              "tanh, exp, log, sigmoid, sqrt, abs, minimum, maximum, "
                                                              "clamp)")),
    ("tensor_method", lambda s, b, h, q, kv: s.erf(), outside(".erf()", "(a traced value is an expression, with no "
                                                                        "Python value; supported: where, tanh, exp, "
                                                                        "log, sigmoid, sqrt, abs, minimum, maximum, "
                                                                        "clamp)")),
    ("tensor_index", lambda s, b, h, q, kv: s + TABLE[h, INDICES], outside(
        "indexing `TABLE` with a tensor that is not an index expression", "(an index is an integer expression of b, "
        "h, q_idx, kv_idx, literals and captured tensors' elements)")),
    ("real_index", lambda s, b, h, q, kv: TABLE[h, s], outside("indexing `TABLE` with a real value",
                                                               "(an index is an integer expression)")),
    ("slice", lambda s, b, h, q, kv: s + TABLE[h, :].sum(), None),
    ("five_dims", lambda s, b, h, q, kv: s + BIG[b, h, q, kv, 0], outside("the 5-dim tensor `BIG`",
                                                                          "(kgen's variant tensors have 1 to 4 dims)")),
    ("partial_read", lambda s, b, h, q, kv: s + TABLE[h], outside("`TABLE` indexed in 1 of its 2 dims",
                                                                  "(a read takes one integer index per dim)")),
    ("real_floordiv", lambda s, b, h, q, kv: s // 2, outside("floor division (//) of a real value",
                                                             "(// and % take integers; / divides reals)")),
    ("bitwise_int", lambda s, b, h, q, kv: s + (q & 3), outside("& of integers (bitwise or on numbers)",
                                                                "(&, |, ^ and ~ combine masks (bools): and, or, xor, "
                                                                "not)")),
    ("inf_outside_where", lambda s, b, h, q, kv: s + torch.where(q >= kv, 0.0, -math.inf), outside(
        "the value -inf", "(where(condition, value, -inf) in a score_mod is a mask; else pass mask_mod)")),
    ("inf_on_score", lambda s, b, h, q, kv: torch.where(s > 0, s, -math.inf), outside(
        "a -inf chosen by a condition on score", "(a mask may not read score)")),
    ("returns_bool", lambda s, b, h, q, kv: q >= kv, outside("a score_mod that returns a bool",
                                                             "(a mask: pass mask_mod)")),
    ("half", lambda s, b, h, q, kv: s.to(torch.float16), outside(
        "converting to torch.float16", "(kgen evaluates score_mod in float32; use float32, int32 or bool)")),
    ("real_to_int", lambda s, b, h, q, kv: s + (s * 4).long(), outside(
        "converting a real value to torch.int32", "(the language has no real-to-integer rounding)")),
    ("big_integer", lambda s, b, h, q, kv: s + (q + 2 ** 40), outside("the integer 1099511627776",
                                                                      "(kgen's integers are 32-bit)")),
    ("traced_exponent", lambda s, b, h, q, kv: 2 ** s, outside("a power with a traced exponent")),
    ("reduction", lambda s, b, h, q, kv: torch.max(s, 0), outside(
        "torch.max(x, dim) or a reduction", "(torch.minimum/maximum and torch.min/max of two values are "
                                            "elementwise)")),
]


@pytest.mark.parametrize("name,fn,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_outside_the_language(name, fn, message):
    with pytest.raises(FlexTraceError) as error:
        flex._trace("score_mod", fn)
    if message is None:
        assert str(error.value).startswith("score_mod: ") and "outside kgen's expression language" in str(error.value)
    else:
        assert str(error.value) == message


def test_mask_mod_errors():
    with pytest.raises(FlexTraceError, match=re.escape(outside("a mask_mod that returns a number", "(a mask_mod returns "
                                                               "a bool: a comparison, &, |, ~)", "mask_mod"))):
        flex._trace("mask_mod", lambda b, h, q, kv: q - kv)
    with pytest.raises(FlexTraceError, match="^mask_mod: Python control flow on a traced value"):
        flex._trace("mask_mod", lambda b, h, q, kv: bool(q >= kv))


def test_bool_of_a_proxy_raises():
    with pytest.raises(FlexTraceError, match="^flex_attention: Python control flow on a traced value"):
        bool(flex._Expr("name", ("q",), "int", True) > 3)


def test_conversions_warn_once_per_trace():
    doc = torch.zeros(NK, dtype=torch.int64)

    def document(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]
    with pytest.warns(UserWarning, match=r"mask_mod reads the torch.int64 tensor `doc`, converted to torch.int32"):
        flex._trace("mask_mod", document)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flex._trace("mask_mod", document)  # cached: no second warning


# --- the cache ---------------------------------------------------------------------------------------

def test_trace_is_cached_per_code_and_closure_kinds():
    seen = []

    def make(rel, softcap):
        def biased(score, b, h, q_idx, kv_idx):
            seen.append(1)
            return softcap * torch.tanh(score / softcap) + rel[h, q_idx]
        return biased
    first, second = make(_tensor(H, NQ), 30.0), make(_tensor(H, NQ, seed=9), 50.0)
    a, b = flex._trace("score_mod", first), flex._trace("score_mod", second)
    assert a is b and len(seen) == 1  # a closure recreated with new values reuses the trace
    _, _, declared = flex._declarations((a,))
    assert [flex._value(s, second) for _, s, _ in declared][1] is second.__closure__[0].cell_contents
    assert [flex._value(s, second) for _, s, _ in declared][0] == 50.0
    other_shape = make(_tensor(H, NQ + 1), 30.0)
    assert flex._trace("score_mod", other_shape) is not a and len(seen) == 2


def test_a_float_reaching_python_becomes_a_literal():
    def make(softcap):
        def capped(score, b, h, q_idx, kv_idx):
            if softcap > 0:
                return softcap * torch.tanh(score / softcap)
            return score
        return capped
    score, _, declared = traced("score_mod", make(25.0))
    assert score == "(25.0*tanh((score/25.0)))" and declared == {}
    assert traced("score_mod", make(0.0))[0] is None


def test_global_tensors_are_read_at_each_call():
    global GLOBAL_BIAS
    saved = GLOBAL_BIAS
    trace = flex._trace("score_mod", global_bias)
    try:
        GLOBAL_BIAS = saved.clone()
        assert flex._trace("score_mod", global_bias) is trace
        source = flex._declarations((trace,))[2][0][1]
        assert flex._value(source, global_bias) is GLOBAL_BIAS
        GLOBAL_BIAS = saved[:, :10].clone()
        assert flex._trace("score_mod", global_bias) is not trace
    finally:
        GLOBAL_BIAS = saved


# --- flex_attention's calls into kgen (the stand-in library) -------------------------------------------

def _qkv(heads_kv=2, requires_grad=False):
    q = _tensor(B, 4, NQ, 16, seed=10, dtype=torch.bfloat16)
    k, v = (_tensor(B, heads_kv, NK, 16, seed=s, dtype=torch.bfloat16) for s in (11, 12))
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def test_flex_attention_passes_the_variant(calls):
    q, k, v = _qkv()
    rel = _tensor(H, NQ + NK)
    block_mask = flex_api.create_block_mask(sliding_window, None, None, NQ, NK, device="cpu")
    o = kgen.torch.flex_attention(q, k, v, score_mod=make_relative_bias(rel), block_mask=block_mask, scale=0.5,
                                  enable_gqa=True)
    name, *tensors, c = calls[-1]
    assert name == "kgen_attention_forward_variant" and o.shape == q.shape
    assert (c["score_mod"], c["mask_mod"]) == (b"(score+rel[h][((q-k)+52)])", b"((q>=k)&&((q-k)<=8))")
    assert [t[0] for t in c["tensors"]] == [b"rel"] and c["tensors"][0][1] == (H, NQ + NK)
    assert c["scalars"] == [] and c["window_left"] == -1


def test_block_mask_and_mask_mod_and_score_mask(calls):
    q, k, v = _qkv()
    block_mask = flex_api.create_block_mask(causal, None, None, NQ, NK, device="cpu")
    kgen.torch.flex_attention(q, k, v, score_mod=make_softcap(30.0), block_mask=block_mask,
                              mask_mod=prefix_lm, enable_gqa=True)
    c = calls[-1][-1]
    assert (c["score_mod"], c["mask_mod"]) == (b"(softcap*tanh((score/softcap)))", b"((q>=k))&&(((k<5)||(q>=k)))")
    assert c["scalars"] == [(b"softcap", 30.0, 0)]
    kgen.torch.flex_attention(q, k, v, score_mod=masked_scaled, mask_mod=make_document_mask(_documents().int()),
                              enable_gqa=True)
    c = calls[-1][-1]
    assert (c["score_mod"], c["mask_mod"]) == (b"where((k<3),(score*2.0),score)", b"((!(q<k)))&&((doc[q]==doc[k]))")


def test_plain_flex_attention_is_plain_attention(calls):
    q, k, v = _qkv(heads_kv=4)
    kgen.torch.flex_attention(q, k, v)
    assert calls[-1][0] == "kgen_attention_forward"


def test_return_lse_and_gradients(calls):
    q, k, v = _qkv(requires_grad=True)
    rel = _tensor(H, NQ + NK).requires_grad_()
    o, lse = kgen.torch.flex_attention(q, k, v, score_mod=make_relative_bias(rel), mask_mod=causal, enable_gqa=True,
                                       return_lse=True)
    assert lse.shape == (B, 4, NQ) and lse.dtype == torch.float32
    o.float().sum().backward()
    assert calls[-1][0] == "kgen_attention_backward_variant"
    assert bool((rel.grad == GRAD).all()) and q.grad is not None and k.grad is not None
    o, lse = kgen.torch.flex_attention(q, k, v, score_mod=make_relative_bias(rel), enable_gqa=True, return_lse=True)
    with pytest.raises(NotImplementedError, match="gradients through lse are not available"):
        (o.float().sum() + lse.sum()).backward()
    with torch.no_grad():
        o, lse = kgen.torch.flex_attention(q, k, v, score_mod=make_relative_bias(rel), enable_gqa=True,
                                           return_lse=True)
    assert calls[-1][0] == "kgen_attention_forward_variant" and lse.shape == (B, 4, NQ)


def test_bf16_parameter_learns_through_its_conversion(calls):
    q, k, v = _qkv(requires_grad=True)
    slopes = _tensor(H, dtype=torch.bfloat16).requires_grad_()
    with pytest.warns(UserWarning, match="converted to torch.float32 on every call"):
        o = kgen.torch.flex_attention(q, k, v, score_mod=make_alibi(slopes), enable_gqa=True)
    o.float().sum().backward()
    assert slopes.grad is not None and slopes.grad.dtype == torch.bfloat16


def test_argument_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="pass enable_gqa=True for GQA"):
        kgen.torch.flex_attention(q, k, v)
    q3 = _tensor(B, 3, NQ, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="GQA needs the 2 kv heads to divide the 3 query heads"):
        kgen.torch.flex_attention(q3, k, v, enable_gqa=True)
    with pytest.raises(TypeError, match="block_mask must be a torch.nn.attention.flex_attention.BlockMask"):
        kgen.torch.flex_attention(q, k, v, block_mask=causal, enable_gqa=True)
    noop = flex_api.create_block_mask(flex_api.noop_mask, None, None, NQ, NK, device="cpu")
    with pytest.raises(FlexTraceError, match="a BlockMask without a mask_mod"):
        kgen.torch.flex_attention(q, k, v, block_mask=noop, enable_gqa=True)
