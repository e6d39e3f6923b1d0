"""FlexAttention code on kgen: `flex_attention` takes PyTorch FlexAttention's arguments (score_mod
and mask_mod as Python callables, a BlockMask) and runs them as a kgen attention variant
(docs/attention.md §8, "FlexAttention code on kgen").

A callable is traced once: it is called on proxy objects that record what it computes (operators,
torch functions through __torch_function__, reads of the tensors it captures), and the record is
printed in kgen's expression language. Whatever falls outside that language raises FlexTraceError
naming the construct. The trace is cached per code object and closure (the kinds of its captured
values), so a call that finds it costs a few dictionary look-ups before kgen.torch's variant path.
"""
from __future__ import annotations

import math
import types
import warnings

import torch

__all__ = ["flex_attention", "FlexTraceError"]

_SUPPORTED = "supported: where, tanh, exp, log, sigmoid, sqrt, abs, minimum, maximum, clamp"
_RESERVED = frozenset(("score", "b", "h", "q", "k", "n_q", "n_k", "where", "min", "max", "abs", "exp", "log", "tanh",
                       "sigmoid", "sqrt", "float"))
_INT_MAX = 2 ** 31 - 1
_FP32_MIN_NORMAL, _FP32_MAX = 2.0 ** -126, float.fromhex("0x1.fffffep+127")
_MAX_SCALARS, _MAX_TENSORS, _MAX_RANK = 8, 4, 4


class FlexTraceError(ValueError):
    """A score_mod or mask_mod that kgen's expression language cannot express (its message names
    the callable and the construct)."""


class _Tracer:
    """The callable being traced: its role (for messages), the function whose globals name captured
    tensors, and the tensors captured outside its closure by identity."""

    def __init__(self, which: str, function):
        self.which = which
        self.function = function
        self.captured: dict[int, _Input] = {}
        self.names: set[str] = set()
        self.warnings: list[str] = []


_tracer: _Tracer | None = None


def _fail(construct: str, hint: str = _SUPPORTED):
    which = _tracer.which if _tracer is not None else "flex_attention"
    raise FlexTraceError(f"{which}: {construct} is outside kgen's expression language ({hint})")


class _Pin(Exception):
    """A closure float reached Python (bool(), float(), an `if`): retrace with it as a literal."""

    def __init__(self, inputs):
        super().__init__()
        self.inputs = inputs


class _Input:
    """A declared scalar or tensor of the variant: its name, where a call finds its value
    (('cell', i), ('default', i), ('kwdefault', name), ('global', name) or ('object', value)), and
    for tensors the shape and dtype seen when traced and the element type the expression reads."""

    __slots__ = ("name", "source", "tensor", "shape", "dtype", "element")

    def __init__(self, name, source, tensor=False, shape=(), dtype=None, element="real"):
        self.name, self.source, self.tensor = name, source, tensor
        self.shape, self.dtype, self.element = tuple(shape), dtype, element


def _fresh_name(wanted: str | None, prefix: str) -> str:
    taken = _tracer.names
    name = wanted if wanted and wanted.isidentifier() and wanted not in _RESERVED and wanted not in taken else None
    i = 0
    while name is None:
        name = f"{prefix}{i}" if f"{prefix}{i}" not in taken and f"{prefix}{i}" not in _RESERVED else None
        i += 1
    taken.add(name)
    return name


_ELEMENTS = {torch.float32: ("real", None), torch.float16: ("real", torch.float32),
             torch.bfloat16: ("real", torch.float32), torch.float64: ("real", torch.float32),
             torch.int32: ("int", None), torch.int64: ("int", torch.int32), torch.int16: ("int", torch.int32),
             torch.int8: ("int", torch.int32), torch.uint8: ("int", torch.int32), torch.bool: ("bool", torch.int32)}


def _tensor_input(name: str, source, t: torch.Tensor) -> _Input:
    """The declared tensor of a captured torch tensor (converted at each call where its dtype is
    not float32 or int32, with a warning when traced)."""
    if t.dim() > _MAX_RANK:
        _fail(f"the {t.dim()}-dim tensor `{name}`", "kgen's variant tensors have 1 to 4 dims")
    if t.dtype not in _ELEMENTS:
        _fail(f"the {t.dtype} tensor `{name}`", "kgen's variant tensors are float32 or int32")
    element, target = _ELEMENTS[t.dtype]
    if target is not None:
        _tracer.warnings.append(f"kgen.torch.flex_attention: {_tracer.which} reads the {t.dtype} tensor `{name}`, "
                                f"converted to {target} on every call (kgen's variant tensors are float32 or int32)")
    return _Input(name, source, True, t.shape, t.dtype, element)


def _capture(t: torch.Tensor) -> _Input:
    """The declared tensor of a torch tensor met outside the traced closure: a global read by the
    callable (looked up again at each call) or an object reached through its arguments' values."""
    found = _tracer.captured.get(id(t))
    if found is not None:
        return found
    function, name, source = _tracer.function, None, ("object", t)
    if isinstance(function, types.FunctionType):
        for candidate in function.__code__.co_names:
            if function.__globals__.get(candidate) is t:
                name, source = candidate, ("global", candidate)
                break
    found = _tensor_input(_fresh_name(name, "t"), source, t)
    _tracer.captured[id(t)] = found
    return found


# --- the traced values ------------------------------------------------------------------------------

class _Traced:
    """What a traced callable computes with: operators and torch functions build expressions;
    Python control flow and conversions to Python values are refused."""

    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(cls, func, types_=(), args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if func is torch.Tensor.where:  # self.where(condition, other)
            return _where(args[1], args[0], args[2] if len(args) > 2 else kwargs["other"])
        handler = _FUNCTIONS.get(name)
        if handler is None:
            _fail(_describe(func))
        return handler(*args, **(kwargs or {}))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        method = _METHODS.get(name) or _FUNCTIONS.get(name)
        if method is None:
            _fail(f".{name}" + ("()" if callable(getattr(torch.Tensor, name, None)) else ""),
                  "a traced value is an expression, with no Python value; " + _SUPPORTED)
        return lambda *args, **kwargs: method(self, *args, **kwargs)

    def __bool__(self):
        e = _lift(self)
        if e.op == "const":
            return bool(e.value)
        if not e.free and e.scalars:
            raise _Pin(e.scalars)
        _fail("Python control flow on a traced value (if, while, and, or, not, bool(), Python's min/max)",
              "use torch.where, &, |, ~, torch.minimum, torch.maximum")

    def _python_value(self, what: str):
        e = _lift(self)
        if e.op == "const":
            return e.value
        if not e.free and e.scalars:
            raise _Pin(e.scalars)
        _fail(f"{what}() of a traced value (math functions, Python numbers)", "use torch functions: " + _SUPPORTED)

    def __float__(self):
        return float(self._python_value("float"))

    def __int__(self):
        return int(self._python_value("int"))

    def __index__(self):
        return int(self._python_value("index"))

    def __iter__(self):
        _fail("iterating over a traced value")

    def __len__(self):
        _fail("len() of a traced value")

    def __setitem__(self, key, value):
        _fail("assigning into a tensor")

    def __add__(self, other): return _arith("+", self, other)
    def __radd__(self, other): return _arith("+", other, self)
    def __sub__(self, other): return _arith("-", self, other)
    def __rsub__(self, other): return _arith("-", other, self)
    def __mul__(self, other): return _arith("*", self, other)
    def __rmul__(self, other): return _arith("*", other, self)
    def __truediv__(self, other): return _truediv(self, other)
    def __rtruediv__(self, other): return _truediv(other, self)
    def __floordiv__(self, other): return _floordiv(self, other)
    def __rfloordiv__(self, other): return _floordiv(other, self)
    def __mod__(self, other): return _remainder(self, other)
    def __rmod__(self, other): return _remainder(other, self)
    def __pow__(self, other): return _pow(self, other)
    def __rpow__(self, other): _fail("a power with a traced exponent")
    def __neg__(self): return _neg(self)
    def __pos__(self): return _lift(self)
    def __abs__(self): return _abs(self)
    def __invert__(self): return _not(self)
    def __and__(self, other): return _logic("&&", self, other)
    def __rand__(self, other): return _logic("&&", other, self)
    def __or__(self, other): return _logic("||", self, other)
    def __ror__(self, other): return _logic("||", other, self)
    def __xor__(self, other): return _xor(self, other)
    def __rxor__(self, other): return _xor(other, self)
    def __lt__(self, other): return _compare("<", self, other)
    def __le__(self, other): return _compare("<=", self, other)
    def __gt__(self, other): return _compare(">", self, other)
    def __ge__(self, other): return _compare(">=", self, other)
    def __eq__(self, other): return _compare("==", self, other)  # noqa: E704
    def __ne__(self, other): return _compare("!=", self, other)  # noqa: E704


class _Expr(_Traced):
    """One node of an expression: op is 'name' (score, b, h, q, k), 'const', 'scalar', 'read'
    (a tensor element: args = (input, *indices)), a binary operator of the language, 'neg', 'not'
    or a function name; kind is 'bool', 'int' or 'real'. nonneg: an integer known to be >= 0 (so
    // and % need no sign correction); score/free/scalars: whether it reads score, whether it reads
    anything but closure floats and literals, and the closure floats it reads."""

    __slots__ = ("op", "args", "kind", "value", "nonneg", "score", "free", "scalars")

    def __init__(self, op: str, args: tuple, kind: str, nonneg: bool = False, value=None):
        self.op, self.args, self.kind, self.nonneg, self.value = op, args, kind, nonneg, value
        children = [a for a in args if isinstance(a, _Expr)]
        self.score = (op == "name" and args[0] == "score") or any(a.score for a in children)
        self.free = op in ("name", "read") or any(a.free for a in children)
        scalars = frozenset(args) if op == "scalar" else frozenset()
        for a in children:
            scalars |= a.scalars
        self.scalars = scalars

    @property
    def dtype(self):
        return {"bool": torch.bool, "int": torch.int32, "real": torch.float32}[self.kind]

    shape = torch.Size()
    ndim = 0
    device = None

    def dim(self):
        return 0

    def size(self, dim=None):
        return torch.Size() if dim is None else _fail("size(dim) of a 0-dim traced value")

    def is_floating_point(self):
        return self.kind == "real"

    def __repr__(self):
        return f"<traced {self.kind}: {_print(self, {})}>"


class _TensorProxy(_Traced):
    """A captured tensor before it is indexed: what the callable may ask of it (shape, dtype,
    indexing; a 0-dim tensor is read as its one element)."""

    def __init__(self, source: _Input):
        self._input = source

    @property
    def shape(self):
        return torch.Size(self._input.shape)

    @property
    def dtype(self):
        return self._input.dtype

    @property
    def ndim(self):
        return len(self._input.shape)

    def dim(self):
        return len(self._input.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self._input.shape[dim]

    def __len__(self):
        if not self._input.shape:
            _fail("len() of a 0-dim tensor")
        return self._input.shape[0]

    def __getitem__(self, key):
        return _index(self._input, (), key)


class _Partial(_Traced):
    """A tensor indexed in fewer dims than it has (bias[h] of a 2-dim bias)."""

    def __init__(self, source: _Input, indices: tuple):
        self._input, self._indices = source, indices

    def __getitem__(self, key):
        return _index(self._input, self._indices, key)


def _describe(func) -> str:
    name = getattr(func, "__name__", repr(func))
    if getattr(torch, name, None) is func:
        return f"torch.{name}"
    if getattr(torch.Tensor, name, None) is func or getattr(torch._C.TensorBase, name, None) is func:
        return f"Tensor.{name}"
    module = getattr(func, "__module__", None)
    return f"{module}.{name}" if module else name


def _const(value) -> _Expr:
    if isinstance(value, bool):
        return _Expr("const", (), "bool", value=value)
    if isinstance(value, int):
        return _Expr("const", (), "int", value >= 0, value)
    return _Expr("const", (), "real", value >= 0, float(value))


def _lift(x) -> _Expr:
    """x as an expression: traced values, Python numbers, 0-dim tensors (read as one element)."""
    if isinstance(x, _Expr):
        return x
    if isinstance(x, _Partial):
        _fail(f"`{x._input.name}` indexed in {len(x._indices)} of its {len(x._input.shape)} dims",
              "a read takes one integer index per dim")
    if isinstance(x, _TensorProxy):
        return _read_whole(x._input)
    if isinstance(x, (bool, int, float)):
        return _const(x)
    if isinstance(x, torch.Tensor):
        return _read_whole(_capture(x))
    _fail(f"a {type(x).__name__} value")


def _read_whole(source: _Input) -> _Expr:
    if source.shape:
        _fail(f"the tensor `{source.name}` used whole", "a read takes one integer index per dim: t[i][j]")
    return _index(source, (), 0)


def _index(source: _Input, indices: tuple, key):
    rank = max(len(source.shape), 1)  # a 0-dim tensor is read as its (1,) view
    shape = source.shape or (1,)
    for item in key if isinstance(key, tuple) else (key,):
        d = len(indices)
        if d >= rank:
            _fail(f"indexing `{source.name}` in more than its {rank} dims")
        if item is None or item is Ellipsis or isinstance(item, (slice, bool)):
            _fail(f"the index {item!r} of `{source.name}` (slices, None, ..., bools)",
                  "a read takes one integer index per dim")
        if isinstance(item, _Partial) or (isinstance(item, torch.Tensor) and not isinstance(item, _Traced)) or \
                (isinstance(item, _TensorProxy) and item._input.shape):
            _fail(f"indexing `{source.name}` with a tensor that is not an index expression",
                  "an index is an integer expression of b, h, q_idx, kv_idx, literals and captured tensors' elements")
        if isinstance(item, int):
            index = item + shape[d] if item < 0 else item
            if not 0 <= index < shape[d]:
                _fail(f"the index {item} of `{source.name}` (dim {d} has size {shape[d]})", "an index within its dim")
            item = _const(index)
        else:
            item = _lift(item)
        if item.kind != "int":
            _fail(f"indexing `{source.name}` with a {'real' if item.kind == 'real' else 'bool'} value",
                  "an index is an integer expression")
        indices += (item,)
    if len(indices) < rank:
        return _Partial(source, indices)
    read = _Expr("read", (source, *indices), "real" if source.element == "real" else "int")
    return _compare("!=", read, 0) if source.element == "bool" else read


# --- the operations -----------------------------------------------------------------------------------

def _number(x) -> _Expr:
    e = _lift(x)
    if e.kind == "bool":
        return _where(e, 1, 0)
    return e


def _promote_kind(a: _Expr, b: _Expr) -> str:
    return "real" if "real" in (a.kind, b.kind) else "int"


_FOLD = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
         "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y,
         "==": lambda x, y: x == y, "!=": lambda x, y: x != y}


def _arith(op: str, x, y) -> _Expr:
    a, b = _number(x), _number(y)
    if a.op == "const" and b.op == "const":
        return _const(_FOLD[op](a.value, b.value))
    return _Expr(op, (a, b), _promote_kind(a, b), op != "-" and a.nonneg and b.nonneg)


def _to_real(e: _Expr) -> _Expr:
    if e.kind == "real":
        return e
    if e.op == "const":
        return _const(float(e.value))
    return _Expr("float", (e,), "real", e.nonneg)


def _truediv(x, y, rounding_mode: str | None = None) -> _Expr:
    if rounding_mode == "floor":
        return _floordiv(x, y)
    a, b = _number(x), _number(y)
    if rounding_mode == "trunc":
        if "real" in (a.kind, b.kind):
            _fail("division with rounding_mode='trunc' of a real value", "the language has no real-to-integer rounding")
        return _Expr("/", (a, b), "int", a.nonneg and b.nonneg)
    if a.op == "const" and b.op == "const" and b.value != 0:
        return _const(a.value / b.value)
    if a.kind == "int" and b.kind == "int":  # Python's true division of integers is real
        a = _to_real(a)
    return _Expr("/", (a, b), "real")


def _integers(what: str, a: _Expr, b: _Expr) -> None:
    if "real" in (a.kind, b.kind):
        _fail(f"{what} of a real value", "// and % take integers; / divides reals")


def _sign_differs(r: _Expr, b: _Expr) -> _Expr:
    """r != 0 && (r < 0) != (b < 0): where C's truncation and Python's floor differ."""
    return _logic("&&", _compare("!=", r, 0), _compare("!=", _compare("<", r, 0), _compare("<", b, 0)))


def _floordiv(x, y) -> _Expr:
    a, b = _number(x), _number(y)
    _integers("floor division (//)", a, b)
    if a.op == "const" and b.op == "const" and b.value != 0:
        return _const(a.value // b.value)
    quotient = _Expr("/", (a, b), "int", a.nonneg and b.nonneg)
    if a.nonneg and b.nonneg:
        return quotient
    return _arith("-", quotient, _where(_sign_differs(_Expr("%", (a, b), "int"), b), 1, 0))


def _remainder(x, y) -> _Expr:
    a, b = _number(x), _number(y)
    _integers("the remainder (%)", a, b)
    if a.op == "const" and b.op == "const" and b.value != 0:
        return _const(a.value % b.value)
    r = _Expr("%", (a, b), "int", a.nonneg and b.nonneg)
    if a.nonneg and b.nonneg:
        return r
    return _where(_sign_differs(r, b), _arith("+", r, b), r)


def _fmod(x, y) -> _Expr:
    a, b = _number(x), _number(y)
    _integers("fmod", a, b)
    return _Expr("%", (a, b), "int", a.nonneg and b.nonneg)


def _neg(x) -> _Expr:
    a = _lift(x)
    if a.kind == "bool":
        _fail("negating a bool", "use ~ for a mask's negation")
    if a.op == "const":
        return _const(-a.value)
    return _Expr("neg", (a,), a.kind)


def _abs(x) -> _Expr:
    a = _number(x)
    if a.op == "const":
        return _const(abs(a.value))
    return _Expr("abs", (a,), a.kind, True)


def _unary(function: str):
    def apply(x, *, out=None) -> _Expr:
        if out is not None:
            _fail(f"torch.{function}(out=...)")
        return _Expr(function, (_number(x),), "real")
    return apply


def _rsqrt(x) -> _Expr:
    return _truediv(1.0, _unary("sqrt")(x))


def _compare(op: str, x, y) -> _Expr:
    a, b = _lift(x), _lift(y)
    if "bool" in (a.kind, b.kind):
        if op not in ("==", "!="):
            _fail(f"the comparison {op} of bools")
        if a.kind != b.kind:
            a, b = _number(a), _number(b)
    if a.op == "const" and b.op == "const":
        return _const(_FOLD[op](a.value, b.value))
    if a.kind == "bool":  # x == True is x, x != True is !x, ...
        for c, other in ((a, b), (b, a)):
            if c.op == "const":
                return other if c.value == (op == "==") else _not(other)
    return _Expr(op, (a, b), "bool")


def _boolean(x, what: str) -> _Expr:
    e = _lift(x)
    if e.kind != "bool":
        _fail(f"{what} of {'integers' if e.kind == 'int' else 'reals'} (bitwise or on numbers)",
              "&, |, ^ and ~ combine masks (bools): and, or, xor, not")
    return e


def _logic(op: str, x, y) -> _Expr:
    a, b = _boolean(x, "&" if op == "&&" else "|"), _boolean(y, "&" if op == "&&" else "|")
    for c, other in ((a, b), (b, a)):
        if c.op == "const":
            return other if c.value == (op == "&&") else _const(c.value)
    return _Expr(op, (a, b), "bool")


def _xor(x, y) -> _Expr:
    return _compare("!=", _boolean(x, "^"), _boolean(y, "^"))


def _not(x) -> _Expr:
    a = _boolean(x, "~")
    if a.op == "const":
        return _const(not a.value)
    if a.op == "not":
        return a.args[0]
    return _Expr("not", (a,), "bool")


def _where(condition, x, y) -> _Expr:
    c = _lift(condition)
    if c.kind != "bool":
        _fail("torch.where with a condition that is not a bool", "the condition is a comparison or a mask")
    a, b = _lift(x), _lift(y)
    if c.op == "const":
        return a if c.value else b
    if (a.kind == "bool") != (b.kind == "bool"):
        a, b = _number(a), _number(b)
    kind = "bool" if a.kind == "bool" else _promote_kind(a, b)
    return _Expr("where", (c, a, b), kind, a.nonneg and b.nonneg)


def _extremum(function: str, reduces: bool = False):
    def apply(x, y=None, *, out=None) -> _Expr:
        if out is not None or not isinstance(y, (_Traced, torch.Tensor, int, float)) or isinstance(y, bool) or \
                (reduces and not isinstance(y, (_Traced, torch.Tensor))):  # torch.max(x, 0) reduces dim 0
            _fail(f"torch.{function}(x, dim) or a reduction" if y is not None else f"torch.{function}(x), a reduction",
                  "torch.minimum/maximum and torch.min/max of two values are elementwise")
        a, b = _number(x), _number(y)
        if a.op == "const" and b.op == "const":
            return _const(min(a.value, b.value) if function == "min" else max(a.value, b.value))
        nonneg = a.nonneg and b.nonneg if function == "min" else a.nonneg or b.nonneg
        return _Expr(function, (a, b), _promote_kind(a, b), nonneg)
    return apply


_minimum, _maximum = _extremum("min"), _extremum("max")


def _clamp(x, min=None, max=None) -> _Expr:  # noqa: A002 - torch's keyword names
    e = _number(x)
    if min is not None:
        e = _maximum(e, min)
    if max is not None:
        e = _minimum(e, max)
    return e


def _pow(x, exponent) -> _Expr:
    if isinstance(exponent, float) and exponent == 0.5:
        return _unary("sqrt")(x)
    if isinstance(exponent, float) and exponent.is_integer():
        exponent = int(exponent)
    if not isinstance(exponent, int) or isinstance(exponent, bool) or not 0 <= exponent <= 8:
        _fail(f"the power x ** {exponent!r}", "integer powers 0 to 8 and ** 0.5 (sqrt)")
    result = _const(1)
    for _ in range(exponent):
        result = _arith("*", result, x) if result.op != "const" else _number(x)
    return result


def _convert(x, dtype) -> _Expr:
    e = _lift(x)
    if dtype in (torch.float32, torch.float64):
        return _to_real(_number(e))
    if dtype in (torch.int32, torch.int64, torch.int16):
        if e.kind == "real":
            _fail(f"converting a real value to {dtype}", "the language has no real-to-integer rounding")
        return _number(e)
    if dtype == torch.bool:
        return e if e.kind == "bool" else _compare("!=", e, 0)
    _fail(f"converting to {dtype}", "kgen evaluates score_mod in float32; use float32, int32 or bool")


def _to(x, *args, dtype=None, **kwargs) -> _Expr:
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (_Traced, torch.Tensor)):
            dtype = a.dtype
    return _lift(x) if dtype is None else _convert(x, dtype)


def _like(fill):
    def apply(x, *args, dtype=None, **kwargs) -> _Expr:
        value = fill if fill is not None else args[0]
        return _convert(value, dtype or x.dtype)
    return apply


def _new(fill):
    def apply(x, size=(), *args, dtype=None, **kwargs) -> _Expr:
        value = fill
        if fill is None:  # new_full(size, value)
            value = args[0] if args else kwargs.pop("fill_value")
        if tuple(size):
            _fail(f"a new tensor of shape {tuple(size)}", "a traced value is one element")
        return _convert(value, dtype or x.dtype)
    return apply


def _getitem(t, key):
    if isinstance(t, (_TensorProxy, _Partial)):
        return t[key]
    if isinstance(t, _Traced):
        _fail("indexing a traced value (score or an index)")
    return _index(_capture(t), (), key)


def _item(*args, **kwargs):
    _fail(".item()", "a traced value is an expression, with no Python value")


_FUNCTIONS = {
    "__getitem__": _getitem, "item": _item, "tolist": _item,
    "add": lambda x, y, alpha=1: _arith("+", x, _arith("*", y, alpha) if alpha != 1 else y),
    "__add__": lambda x, y: _arith("+", x, y), "__radd__": lambda x, y: _arith("+", y, x),
    "sub": lambda x, y, alpha=1: _arith("-", x, _arith("*", y, alpha) if alpha != 1 else y),
    "__sub__": lambda x, y: _arith("-", x, y), "__rsub__": lambda x, y: _arith("-", y, x),
    "rsub": lambda x, y: _arith("-", y, x),
    "mul": lambda x, y: _arith("*", x, y), "__mul__": lambda x, y: _arith("*", x, y),
    "__rmul__": lambda x, y: _arith("*", y, x),
    "div": _truediv, "true_divide": _truediv, "__truediv__": _truediv, "__rtruediv__": lambda x, y: _truediv(y, x),
    "floor_divide": _floordiv, "__floordiv__": _floordiv, "__rfloordiv__": lambda x, y: _floordiv(y, x),
    "remainder": _remainder, "__mod__": _remainder, "__rmod__": lambda x, y: _remainder(y, x), "fmod": _fmod,
    "neg": _neg, "negative": _neg, "__neg__": _neg, "abs": _abs, "absolute": _abs, "__abs__": _abs,
    "lt": lambda x, y: _compare("<", x, y), "less": lambda x, y: _compare("<", x, y),
    "__lt__": lambda x, y: _compare("<", x, y),
    "le": lambda x, y: _compare("<=", x, y), "less_equal": lambda x, y: _compare("<=", x, y),
    "__le__": lambda x, y: _compare("<=", x, y),
    "gt": lambda x, y: _compare(">", x, y), "greater": lambda x, y: _compare(">", x, y),
    "__gt__": lambda x, y: _compare(">", x, y),
    "ge": lambda x, y: _compare(">=", x, y), "greater_equal": lambda x, y: _compare(">=", x, y),
    "__ge__": lambda x, y: _compare(">=", x, y),
    "eq": lambda x, y: _compare("==", x, y), "__eq__": lambda x, y: _compare("==", x, y),
    "ne": lambda x, y: _compare("!=", x, y), "not_equal": lambda x, y: _compare("!=", x, y),
    "__ne__": lambda x, y: _compare("!=", x, y),
    "logical_and": lambda x, y: _logic("&&", x, y), "bitwise_and": lambda x, y: _logic("&&", x, y),
    "__and__": lambda x, y: _logic("&&", x, y), "__rand__": lambda x, y: _logic("&&", y, x),
    "logical_or": lambda x, y: _logic("||", x, y), "bitwise_or": lambda x, y: _logic("||", x, y),
    "__or__": lambda x, y: _logic("||", x, y), "__ror__": lambda x, y: _logic("||", y, x),
    "logical_xor": _xor, "bitwise_xor": _xor, "__xor__": _xor,
    "logical_not": _not, "bitwise_not": _not, "__invert__": _not,
    "where": _where, "tanh": _unary("tanh"), "exp": _unary("exp"), "log": _unary("log"),
    "sigmoid": _unary("sigmoid"), "sqrt": _unary("sqrt"), "rsqrt": _rsqrt,
    "minimum": _minimum, "maximum": _maximum, "min": _extremum("min", True), "max": _extremum("max", True), "fmin": _minimum, "fmax": _maximum,
    "clamp": _clamp, "clip": _clamp, "clamp_min": lambda x, v: _clamp(x, min=v),
    "clamp_max": lambda x, v: _clamp(x, max=v), "relu": lambda x, inplace=False: _maximum(x, 0),
    "square": lambda x: _arith("*", x, x), "pow": _pow, "__pow__": _pow,
    "to": _to, "type_as": lambda x, other: _convert(x, other.dtype),
    "zeros_like": _like(0), "ones_like": _like(1), "full_like": _like(None),
    "new_zeros": _new(0), "new_ones": _new(1), "new_full": _new(None),
}
_METHODS = {
    "float": lambda x: _convert(x, torch.float32), "double": lambda x: _convert(x, torch.float32),
    "int": lambda x: _convert(x, torch.int32), "long": lambda x: _convert(x, torch.int32),
    "bool": lambda x: _convert(x, torch.bool),
    "where": lambda x, condition, other: _where(condition, x, other),
}


# --- printing in kgen's language -----------------------------------------------------------------------

def _literal(value) -> str:
    if isinstance(value, bool):
        return "(0==0)" if value else "(0!=0)"
    if isinstance(value, int):
        if abs(value) > _INT_MAX:
            _fail(f"the integer {value}", "kgen's integers are 32-bit")
        return str(value) if value >= 0 else f"(-{-value})"
    if not math.isfinite(value):
        _fail(f"the value {value}", "where(condition, value, -inf) in a score_mod is a mask; else pass mask_mod")
    if value != 0 and not _FP32_MIN_NORMAL <= abs(value) <= _FP32_MAX:
        _fail(f"the real {value!r}", "a real literal is a normal float32 value")
    text = repr(abs(value))
    return text if value >= 0 and math.copysign(1.0, value) > 0 else f"(-{text})"


def _print(e: _Expr, names: dict) -> str:
    op, args = e.op, e.args
    if op == "name":
        return args[0]
    if op == "const":
        return _literal(e.value)
    if op == "scalar":
        return names.get(args[0], args[0].name)
    if op == "read":
        return names.get(args[0], args[0].name) + "".join(f"[{_print(i, names)}]" for i in args[1:])
    if op == "neg":
        return f"(-{_print(args[0], names)})"
    if op == "not":
        return f"(!{_print(args[0], names)})"
    if op in ("where", "min", "max", "abs", "exp", "log", "tanh", "sigmoid", "sqrt", "float"):
        return f"{op}({','.join(_print(a, names) for a in args)})"
    return f"({_print(args[0], names)}{op}{_print(args[1], names)})"


def _inputs(e: _Expr | None, found: dict) -> dict:
    """The declared inputs `e` reads, in order of first read (a dict used as an ordered set)."""
    if e is not None:
        if e.op in ("scalar", "read"):
            found.setdefault(e.args[0])
        for a in e.args:
            if isinstance(a, _Expr):
                _inputs(a, found)
    return found


def _is_neg_inf(e: _Expr) -> bool:
    return e.op == "const" and e.value == -math.inf


def _split_mask(e: _Expr) -> tuple[_Expr, _Expr | None]:
    """(value, mask) of a score_mod's result: where(c, x, -inf) is x where c holds, masked
    elsewhere, through nested where()s; mask None = every key visible."""
    if e.op != "where":
        return e, None
    c, a, b = e.args
    if _is_neg_inf(a) and _is_neg_inf(b):
        _fail("a score_mod whose every branch is -inf", "a mask: pass mask_mod")
    if _is_neg_inf(b):
        value, mask = _split_mask(a)
        return value, c if mask is None else _logic("&&", c, mask)
    if _is_neg_inf(a):
        value, mask = _split_mask(b)
        return value, _not(c) if mask is None else _logic("&&", _not(c), mask)
    (va, ma), (vb, mb) = _split_mask(a), _split_mask(b)
    if ma is None and mb is None:
        return e, None
    return _where(c, va, vb), _where(c, _const(True) if ma is None else ma, _const(True) if mb is None else mb)


def _check_finite(e: _Expr) -> None:
    if e.op == "const" and e.kind == "real" and not math.isfinite(e.value):
        _literal(e.value)
    for a in e.args:
        if isinstance(a, _Expr):
            _check_finite(a)


# --- tracing and its cache ----------------------------------------------------------------------------

class _Trace:
    """A traced callable: its result (score_mod: the modification, identity = None, and the mask of
    its -inf branches; mask_mod: the mask, None = every key) and the warnings of its conversions."""

    __slots__ = ("score", "mask", "warnings", "keep", "globals")

    def __init__(self, score, mask, warnings_, keep):
        self.score, self.mask, self.warnings, self.keep = score, mask, warnings_, keep
        self.globals = [s for s in _inputs(mask, _inputs(score, {})) if s.source[0] == "global"]


_traces: dict = {}
_pins: dict = {}  # code object -> the indices of the closure floats that reached Python: literals
_combined: dict = {}
_CACHE_LIMIT = 512

_PRIMITIVES = (bool, int, float, complex, str, bytes, type(None))


def _slot_key(value, pinned: bool):
    """What a traced closure value contributes to the cache key: its kind for tensors (shape,
    dtype) and unpinned floats (scalars), its value for other primitives, its identity otherwise
    (the cache entry keeps it alive)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.shape, value.dtype)
    if type(value) is float and not pinned:
        return "float"
    if isinstance(value, _PRIMITIVES):
        return (type(value), value)
    return ("object", id(value))


_EMPTY = object()


def _slots(function: types.FunctionType) -> list[tuple]:
    """[(source, name, value)] of a function's closure cells and defaults."""
    code = function.__code__
    slots = []
    for i, (name, cell) in enumerate(zip(code.co_freevars, function.__closure__ or ())):
        try:
            slots.append((("cell", i), name, cell.cell_contents))
        except ValueError:  # an empty cell
            slots.append((("cell", i), name, _EMPTY))
    defaults = function.__defaults__ or ()
    first = code.co_argcount - len(defaults)
    for i, value in enumerate(defaults):
        slots.append((("default", i), code.co_varnames[first + i], value))
    for name, value in (function.__kwdefaults__ or {}).items():
        slots.append((("kwdefault", name), name, value))
    return slots


def _resolve(function, source):
    kind, where = source
    if kind == "cell":
        return function.__closure__[where].cell_contents
    if kind == "default":
        return function.__defaults__[where]
    if kind == "kwdefault":
        return function.__kwdefaults__[where]
    if kind == "global":
        return function.__globals__.get(where)
    return where


def _unwrap(fn):
    """(function, leading arguments) of a plain function or a bound method, else (None, ())."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return fn.__func__, (fn.__self__,)
    if isinstance(fn, types.FunctionType):
        return fn, ()
    return None, ()


def _key(which: str, fn) -> tuple:
    function, leading = _unwrap(fn)
    if function is None:
        return (which, "callable", id(fn))
    pins = _pins.get(function.__code__, ())
    return (which, function.__code__, tuple(id(x) for x in leading),
            tuple(_slot_key(value, i in pins) for i, (_, _, value) in enumerate(_slots(function))))


def _trace(which: str, fn) -> _Trace:
    key = _key(which, fn)
    trace = _traces.get(key)
    if trace is None or (trace.globals and not _globals_unchanged(trace, fn)):
        while True:
            try:
                trace = _trace_once(which, fn)
                break
            except _Pin as pin:
                function, _ = _unwrap(fn)
                pinned = {i for i, (source, _, _) in enumerate(_slots(function)) for p in pin.inputs
                          if p.source == source}
                if function is None or pinned <= _pins.get(function.__code__, frozenset()):
                    _fail("a closure float used as a Python value")
                _pins[function.__code__] = frozenset(_pins.get(function.__code__, ())) | pinned
                key = _key(which, fn)
        if len(_traces) >= _CACHE_LIMIT:
            _traces.pop(next(iter(_traces)))
        _traces[key] = trace
        for message in trace.warnings:
            warnings.warn(message, stacklevel=4)
    return trace


def _globals_unchanged(trace: _Trace, fn) -> bool:
    """Whether the globals the trace read are still tensors of the shape and dtype traced."""
    for source in trace.globals:
        t = _unwrap(fn)[0].__globals__.get(source.source[1])
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != source.shape or t.dtype != source.dtype:
            return False
    return True


def _trace_once(which: str, fn) -> _Trace:
    global _tracer
    function, leading = _unwrap(fn)
    tracer = _Tracer(which, function)
    previous, _tracer = _tracer, tracer
    try:
        target, keep = fn, [fn, *leading]
        if function is not None:
            target = _with_proxies(function, leading, _pins.get(function.__code__, ()), keep)
        indices = [_Expr("name", (name,), "int", True) for name in ("b", "h", "q", "k")]
        if which == "score_mod":
            result = _lift(target(_Expr("name", ("score",), "real"), *indices))
            if result.kind == "bool":
                _fail("a score_mod that returns a bool", "a mask: pass mask_mod")
            score, mask = _split_mask(result)
            if mask is not None and mask.score:
                _fail("a -inf chosen by a condition on score", "a mask may not read score")
            if mask is not None and mask.op == "const":
                mask = None if mask.value else mask
            if score.op == "name" and score.args[0] == "score":
                score = None
        else:
            mask, score = _lift(target(*indices)), None
            if mask.kind != "bool":
                _fail("a mask_mod that returns a number", "a mask_mod returns a bool: a comparison, &, |, ~")
            if mask.op == "const" and mask.value:
                mask = None
        for e in (score, mask):
            if e is not None:
                _check_finite(e)
                _print(e, {})  # literal range errors now, not at a call
        return _Trace(score, mask, tracer.warnings, keep)
    finally:
        _tracer = previous


def _with_proxies(function: types.FunctionType, leading: tuple, pins, keep: list):
    """`function` with its closure tensors and floats (and defaults) replaced by proxies."""
    values = {}
    for i, (source, name, value) in enumerate(_slots(function)):
        if isinstance(value, torch.Tensor):
            values[source] = _TensorProxy(_tensor_input(_fresh_name(name, "t"), source, value))
        elif type(value) is float and i not in pins and math.isfinite(value):
            values[source] = _Expr("scalar", (_Input(_fresh_name(name, "s"), source),), "real", value >= 0, value)
        else:
            values[source] = value
            keep.append(value)
    cells = tuple(types.CellType() if values[("cell", i)] is _EMPTY else types.CellType(values[("cell", i)])
                  for i in range(len(function.__closure__ or ())))
    defaults = tuple(values[("default", i)] for i in range(len(function.__defaults__ or ()))) or None
    traced = types.FunctionType(function.__code__, function.__globals__, function.__name__, defaults, cells or None)
    if function.__kwdefaults__:
        traced.__kwdefaults__ = {name: values[("kwdefault", name)] for name in function.__kwdefaults__}
    return traced.__get__(leading[0]) if leading else traced


# --- the entry point ------------------------------------------------------------------------------------

def _declarations(traces: tuple) -> tuple:
    """(score_mod text, mask_mod text, [(name, input, index of its trace)]) of (score_mod's trace or
    None, *the mask_mods' traces), each input named once (a name already taken gets a suffix)."""
    found = _combined.get(traces)
    if found is not None:
        return found
    declared, taken, masks, score = [], set(), [], None
    for role, trace in enumerate(traces):
        if trace is None:
            continue
        names = {}
        for source in _inputs(trace.mask, _inputs(trace.score, {})):
            name, i = source.name, 1
            while name in taken:
                name, i = f"{source.name}_{i}", i + 1
            taken.add(name)
            names[source] = name
            declared.append((name, source, role))
        if trace.score is not None:
            score = _print(trace.score, names)
        if trace.mask is not None:
            masks.append(_print(trace.mask, names))
    mask = masks[0] if len(masks) == 1 else "&&".join(f"({m})" for m in masks) if masks else None
    tensors = sum(source.tensor for _, source, _ in declared)
    if tensors > _MAX_TENSORS or len(declared) - tensors > _MAX_SCALARS:
        raise FlexTraceError(f"flex_attention: score_mod and mask_mod read {tensors} tensors and "
                             f"{len(declared) - tensors} closure floats; kgen's variants take at most "
                             f"{_MAX_TENSORS} tensors and {_MAX_SCALARS} scalars")
    found = (score, mask, declared)
    if len(_combined) >= _CACHE_LIMIT:
        _combined.pop(next(iter(_combined)))
    _combined[traces] = found
    return found


def _value(source: _Input, fn):
    function, _ = _unwrap(fn)
    value = _resolve(function, source.source) if function is not None else source.source[1]
    if not source.tensor:
        return float(value)
    if value.dim() == 0:
        value = value.reshape(1)
    element, target = _ELEMENTS[value.dtype]
    return value if target is None else value.to(target)


def _mask_of(block_mask):
    mask_mod = getattr(block_mask, "mask_mod", None)
    if mask_mod is None:
        raise TypeError(f"block_mask must be a torch.nn.attention.flex_attention.BlockMask, got "
                        f"{type(block_mask).__name__}")
    from torch.nn.attention import flex_attention as flex
    if mask_mod is flex.noop_mask:
        if tuple(block_mask.BLOCK_SIZE) == (flex._LARGE_SPARSE_BLOCK_SIZE,) * 2:
            return None  # FlexAttention's own "no block mask"
        raise FlexTraceError("flex_attention: a BlockMask without a mask_mod (from_kv_blocks) is outside kgen's "
                             "expression language (kgen reads the mask as a function: pass mask_mod=, or a block_mask "
                             "from create_block_mask(mask_mod, ...))")
    if mask_mod is getattr(flex, "_sliced_mask_mod_error", None):
        raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")
    return mask_mod


def flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod=None, block_mask=None,
                   scale: float | None = None, enable_gqa: bool = False, return_lse: bool = False,
                   kernel_options: dict | None = None, *, mask_mod=None):
    """PyTorch FlexAttention's flex_attention on kgen's kernels: score_mod and the mask traced into
    kgen's expression language (docs/attention.md §8) and run as kgen.torch.attention's variant.

    query (b, h_q, n_q, d), key and value (b, h_kv, n_k, d) as FlexAttention takes them (BHND);
    h_q == h_kv unless enable_gqa=True, then h_kv must divide h_q (kgen runs GQA natively). scale
    defaults to 1/sqrt(d). score_mod(score, b, h, q_idx, kv_idx) -> score and mask_mod(b, h,
    q_idx, kv_idx) -> bool have FlexAttention's meaning: score is the scaled logit, h the query
    head, q_idx and kv_idx plain row indices (no bottom-right shift when n_q != n_k: they are
    the language's q and k). The mask is block_mask.mask_mod (the function create_block_mask was
    given; its block tables are not read) and-ed with mask_mod (a kgen extension); kgen's causal stays off, as
    FlexAttention applies no mask of its own. kernel_options is accepted and ignored. Returns o,
    or (o, lse) with return_lse (lse: float32 (b, h_q, n_q), natural log, -inf for a row that
    sees no key). Gradients flow to query, key, value and to each captured float32 tensor that
    requires grad (other float dtypes are converted, so theirs flow through the conversion);
    gradients through lse are not available (NotImplementedError).

    Tracing: each callable is called once on proxies and its result printed as an expression
    (FlexTraceError names what falls outside the language: Python control flow on a traced value,
    .item(), torch functions other than where, tanh, exp, log, sigmoid, sqrt, abs, minimum, maximum,
    clamp and arithmetic, indexing with anything but an integer expression, tensors above 4 dims).
    - Captured tensors (closure variables, defaults, globals, tensors reached through captured
      objects) indexed as t[i, j] or t[i][j] become declared tensors named after their variable
      (else t0, t1, ...); float32 and int32 are passed as they are, other dtypes converted on each
      call with a warning when traced; a 0-dim tensor reads as its one element.
    - Closure floats become real scalars named after their variable (a new value reuses the
      kernel); a float that reaches Python (an `if`, float()) is retraced as a literal. Ints,
      bools and other Python values are literals (a new value traces and compiles anew).
    - // and % follow Python's floor semantics (exactly, with a sign correction unless both
      operands are known non-negative); / of two integers is real division; torch.fmod and
      torch.div(..., rounding_mode="trunc") give the language's C semantics.
    - A score_mod returning where(condition, x, -inf) (nested where()s too) is x with the
      condition as a mask; -inf or inf anywhere else, and a condition that reads score, are refused.
    The trace is cached per code object and the kinds of its closure values (tensors by shape and
    dtype, floats as scalars, other values by value or identity); tensors and floats are read
    from the callable's closure at each call, so a closure recreated every step reuses the trace.
    """
    del kernel_options
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"flex_attention: {name} must be a 4-dim (b, h, n, d) tensor")
    if not enable_gqa and query.size(1) != key.size(1):
        raise ValueError(f"flex_attention: query has {query.size(1)} heads and key/value {key.size(1)}: "
                         f"pass enable_gqa=True for GQA")
    if enable_gqa and query.size(1) % key.size(1):
        raise ValueError(f"flex_attention: GQA needs the {key.size(1)} kv heads to divide the "
                         f"{query.size(1)} query heads")
    if query.size(0) != key.size(0):
        raise ValueError(f"flex_attention: query's batch {query.size(0)} differs from key's {key.size(0)}")
    masks = [m for m in (None if block_mask is None else _mask_of(block_mask), mask_mod) if m is not None]
    if len(masks) == 2 and masks[0] is masks[1]:
        masks.pop()
    callables = (score_mod, *masks)
    traces = (None if score_mod is None else _trace("score_mod", score_mod),
              *(_trace("mask_mod", m) for m in masks))
    score_text, mask_text, declared = _declarations(traces)
    scalars, tensors = {}, {}
    for name, source, role in declared:
        (tensors if source.tensor else scalars)[name] = _value(source, callables[role])
    keywords = {}
    if score_text is not None:
        keywords["score_mod"] = score_text
    if mask_text is not None:
        keywords["mask_mod"] = mask_text
    if scalars:
        keywords["scalars"] = scalars
    if tensors:
        keywords["tensors"] = tensors
    if not return_lse:
        return _kgen_torch.attention(query, key, value, scale=scale, **keywords)
    return _attention_with_lse(query, key, value, scale, keywords)


def _attention_with_lse(query, key, value, scale, keywords):
    """(o, lse) of the variant: o differentiable as kgen.torch.attention's, lse without gradient."""
    _kgen_torch._check_types("query key value", query, key, value)
    q, k, v = _kgen_torch._autocast(query, key, value)
    variant = _kgen_torch._variant_of("flex_attention", keywords)
    learnable = tuple(t.requires_grad and t.dtype == torch.float32 for t in variant.tensors)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or any(learnable)):
        return _AttentionVariantLse.apply(q, k, v, False, scale, "bhnd", False,
                                          _kgen_torch._variant_constants(variant), learnable, None, None, None,
                                          *variant.tensors)
    return _kgen_torch._variant_forward(q, k, v, False, scale, "bhnd", variant, None, None, True)


from . import torch as _kgen_torch  # noqa: E402 - kgen.torch imports this module at its end


class _AttentionVariantLse(_kgen_torch._AttentionVariant):
    """kgen.torch's autograd Function of a variant, returning lse beside o; a gradient reaching
    lse raises NotImplementedError (kgen's backward takes dO only)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, deterministic, constants, learnable, alibi_slopes, document_ids,
                sinks, *tensors):
        o = _kgen_torch._AttentionVariant.forward(ctx, q, k, v, causal, scale, layout, deterministic, constants,
                                                  learnable, alibi_slopes, document_ids, sinks, *tensors)
        return o, ctx.to_save[4]  # the lse the Function saved for its backward

    @staticmethod
    def backward(ctx, d_o, d_lse):
        if d_lse is not None:
            raise NotImplementedError("kgen.torch.flex_attention: gradients through lse are not available "
                                      "(kgen's backward takes the gradient of o only)")
        return _kgen_torch._AttentionVariant.backward(ctx, d_o)
