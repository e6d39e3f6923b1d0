"""Runs kgen's AMD attention kernels on the emulator and checks them against float64 references.

The code object is the one kgen builds and caches: `kgen inspect` compiles the variant into a
private cache directory (KGEN_CACHE_DIR), and the entry is read back from the cache file
(cache/binary_cache.h: magic, version, key, metadata JSON, binary, SHA-256). The kernel arguments
are packed at the offsets that params_layout.cpp, compiled against kgen's headers, prints.
"""
from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

import emu
from codeobject import CodeObject
from disasm import disassemble, find_objdump

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def work_dir() -> str:
    d = os.environ.get("KGEN_AMDEMU_WORK") or os.path.join(tempfile.gettempdir(), f"kgen-amdemu-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def missing_tools(kgen_bin: str | None) -> str | None:
    """Why the tier cannot run here (None when it can)."""
    if not shutil.which("clang-22") and not shutil.which("clang++-22"):
        return "clang-22 is not installed"
    if find_objdump() is None:
        return "llvm-objdump-22 is not installed"
    if not kgen_bin or not os.access(kgen_bin, os.X_OK):
        return f"the kgen CLI is not built ({kgen_bin})"
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("c++")):
        return "no host C++ compiler for params_layout.cpp"
    return None


# ---------------------------------------------------------------- parameter layout
_layout_cache: dict | None = None


def params_layout() -> dict:
    global _layout_cache
    if _layout_cache is None:
        src = os.path.join(HERE, "params_layout.cpp")
        headers = sorted(glob.glob(os.path.join(REPO, "templates/kgen_device/attention/*.h")))
        h = hashlib.sha256()
        for p in [src] + headers:
            h.update(open(p, "rb").read())
        exe = os.path.join(work_dir(), f"params_layout-{h.hexdigest()[:16]}")
        if not os.path.exists(exe):
            cxx = os.environ.get("CXX") or "c++"
            subprocess.run([cxx, "-std=c++20", "-I", os.path.join(REPO, "templates"), src, "-o", exe + ".tmp"], check=True)
            os.replace(exe + ".tmp", exe)
        _layout_cache = json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)
        for name, s in _layout_cache.items():
            if not isinstance(s, dict) or "fields" not in s:
                continue  # the launch geometry printed beside the structs
            end = 0
            for fname, off, size, kind in s["fields"]:
                if kind == "unknown" or off < end or off - end >= size:
                    raise RuntimeError(f"{name}.{fname}: unexpected layout (offset {off}, after {end})")
                end = off + size
            if (end + 7) // 8 * 8 != s["size"]:
                raise RuntimeError(f"{name}: params_layout.cpp does not list every field ({end} of {s['size']} bytes)")
    return _layout_cache


def pack_params(struct_name: str, values: dict) -> bytes:
    """`struct_name`'s bytes with every field of `values`; each field must be given but the arrays
    of kind "zeros", which stay zero."""
    layout = params_layout()[struct_name]
    buf = bytearray(layout["size"])
    names = {f[0] for f in layout["fields"] if f[3] != "zeros"}
    if set(values) != names:
        raise ValueError(f"{struct_name}: missing {sorted(names - set(values))}, unknown {sorted(set(values) - names)}")
    fmt = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}
    for name, off, size, kind in layout["fields"]:
        if kind != "zeros":
            struct.pack_into(fmt[kind], buf, off, values[name])
    return bytes(buf)


# ---------------------------------------------------------------- code objects from kgen's cache
@dataclass
class Kernel:
    variant: str
    arch: str
    binary: bytes
    meta: dict
    path: str  # the code object on disk (for llvm-objdump)


def read_cache_entry(path: str) -> tuple[dict, bytes]:
    b = open(path, "rb").read()
    if b[:5] != b"KGEN\x01":
        raise ValueError(f"{path}: not a kgen cache entry")
    o = 9
    parts = []
    for _ in range(3):
        (n,) = struct.unpack_from("<Q", b, o)
        o += 8
        parts.append(b[o:o + n])
        o += n
    if hashlib.sha256(b[:o]).digest() != b[o:o + 32]:
        raise ValueError(f"{path}: checksum mismatch")
    return json.loads(parts[1]), parts[2]


def build_kernels(kgen_bin: str, arch: str, op: str, selector: list[str], config: str | None) -> list[Kernel]:
    """Compiles a variant's kernels with kgen (into a private cache) and returns their code
    objects in the order `kgen inspect` lists them (for attention_bwd: launch order,
    attention_backward_kernels). `selector`: the CLI's variant arguments."""
    cache = os.path.join(work_dir(), "cache")
    cmd = [kgen_bin, "inspect", "--op", op, "--arch", arch] + selector
    if config:
        cmd += ["--config", config]
    env = dict(os.environ, KGEN_CACHE_DIR=cache, KGEN_LOG_LEVEL="warn")
    # `--show resources` compiles the kernels into the cache; `--show key` names their entries.
    subprocess.run(cmd + ["--show", "resources"], check=True, capture_output=True, text=True, env=env)
    out = subprocess.run(cmd + ["--show", "key"], check=True, capture_output=True, text=True, env=env).stdout
    keys = [line.split()[1] for line in out.splitlines() if line.startswith("key ")]
    if not keys or any(len(k) != 64 or any(c not in "0123456789abcdef" for c in k) for k in keys):
        raise RuntimeError(f"cannot find the cache keys in the output of {' '.join(cmd)}:\n{out}")
    kernels = []
    for key in keys:
        entry = os.path.join(cache, "v1", key[:2], key + ".kgen")
        meta, binary = read_cache_entry(entry)
        if meta.get("target") != arch:
            raise RuntimeError(f"{entry}: built for {meta.get('target')}, not {arch}")
        path = os.path.join(work_dir(), key + ".co")
        if not os.path.exists(path):
            with open(path + ".tmp", "wb") as f:
                f.write(binary)
            os.replace(path + ".tmp", path)
        kernels.append(Kernel(meta["variant"], arch, binary, meta, path))
    return kernels


def build_kernel(kgen_bin: str, arch: str, op: str, dtype: str, head_dim: int, causal: bool, config: str | None) -> Kernel:
    """The attention forward's one kernel (the CLI builds its variant from dtype, d, causal)."""
    selector = ["--dtype", dtype, "-d", str(head_dim)] + (["--causal"] if causal else [])
    kernels = build_kernels(kgen_bin, arch, op, selector, config)
    if len(kernels) != 1:
        raise RuntimeError(f"{op}: expected one kernel, kgen lists {len(kernels)}")
    return kernels[0]


def load_dispatch(kernel: Kernel, memory: emu.Memory) -> emu.Dispatch:
    co = CodeObject(kernel.binary)
    entry = kernel.meta["entry"]
    kd, code_addr = co.kernel_descriptor(entry)
    funcs = disassemble(kernel.path, kernel.arch)
    if entry not in funcs:
        raise RuntimeError(f"{kernel.path}: no disassembly of {entry}")
    ins = funcs[entry]
    if not ins or ins[0].addr != code_addr:
        raise RuntimeError(f"{entry}: the descriptor's entry {code_addr:#x} is not the first instruction")
    return emu.Dispatch(memory, ins, kd, kernel.arch)


# ---------------------------------------------------------------- data types
NAN_BITS = {"fp32": 0x7FC00000, "fp16": 0x7E00, "bf16": 0x7FC0}


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    x = np.asarray(x, np.float32)
    if dtype == "fp32":
        return x.copy()
    if dtype == "fp16":
        return x.astype(np.float16)
    return emu._bf16_round(x.ravel()).astype(np.uint16).reshape(x.shape)


def from_bits(b: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp32":
        return b.view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return b.view(np.float16).astype(np.float64)
    return (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


ELEM = {"fp32": 4, "fp16": 2, "bf16": 2}


# ---------------------------------------------------------------- attention forward
def _softmax_terms(q, k, v, causal: bool, scale: float):
    """The kv heads repeated over their query groups (kk, vv), each row's maximum m of the masked
    scaled scores, whether the row sees a key, and e = exp(s − m) (0 where masked)."""
    nq, nk = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    kk = np.repeat(k, group, axis=1)
    vv = np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    if causal:  # bottom-right aligned: query i sees keys j <= i + n_k - n_q
        i = np.arange(nq)[:, None]
        j = np.arange(nk)[None, :]
        s = np.where(j <= i + (nk - nq), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    visible = np.isfinite(m)
    return kk, vv, m, visible, np.where(visible, np.exp(s - np.where(visible, m, 0)), 0)


def attention_reference(q, k, v, causal: bool, scale: float):
    """float64 o and natural-log lse; a row that sees no key has o = 0, lse = -inf."""
    _, vv, m, visible, p = _softmax_terms(q, k, v, causal, scale)
    l = p.sum(axis=-1, keepdims=True)
    o = np.where(visible, np.einsum("bhij,bhjd->bhid", p, vv) / np.where(l > 0, l, 1), 0)
    lse = np.where(visible[..., 0], np.log(np.where(l[..., 0] > 0, l[..., 0], 1)) + np.where(visible, m, 0)[..., 0], -np.inf)
    return o, lse


BOUNDS = {"fp32": (1e-5, 1e-5, 1e-5), "fp16": (1e-2, 1e-2, 1e-2), "bf16": (1e-2, 2e-2, 2e-2)}  # rel_l2, atol, rtol


def compare(name: str, out: np.ndarray, ref: np.ndarray, dtype: str, rows_are_values: bool = False) -> list[str]:
    """kgen's pass rule (docs/attention.md §5.2), rows being the last dimension (or single values)."""
    bound, atol, rtol = BOUNDS[dtype]
    errs = []
    inf_ref = ~np.isfinite(ref)
    if (np.isnan(out) | (np.isinf(out) & ~inf_ref)).any():
        idx = np.argwhere(np.isnan(out) | (np.isinf(out) & ~inf_ref))[0]
        errs.append(f"{name}: NaN or Inf at {tuple(int(i) for i in idx)}")
        return errs
    if (out[inf_ref] != ref[inf_ref]).any():
        errs.append(f"{name}: entries whose reference is ±inf differ")
    fin = ~inf_ref
    o, r = np.where(fin, out, 0), np.where(fin, ref, 0)
    nref = np.linalg.norm(r)
    if nref > 0:
        rel = np.linalg.norm(o - r) / nref
        cos = float(np.sum(o * r) / (np.linalg.norm(o) * nref)) if np.linalg.norm(o) > 0 else 0.0
        if rel > bound:
            errs.append(f"{name}: rel_l2 {rel:.3e} above {bound:.0e}")
        if cos <= 0.999:
            errs.append(f"{name}: cosine {cos:.6f}")
    if rows_are_values:
        bad = np.abs(o - r) > atol + rtol * np.abs(r)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            errs.append(f"{name}: value at {idx} is {out[idx]:.6g}, reference {ref[idx]:.6g}")
    elif nref > 0:
        rows_o = o.reshape(-1, o.shape[-1])
        rows_r = r.reshape(-1, r.shape[-1])
        rms = nref / math.sqrt(rows_r.shape[0])
        e = np.linalg.norm(rows_o - rows_r, axis=1) / np.maximum(np.linalg.norm(rows_r, axis=1), 0.5 * rms)
        worst = int(np.argmax(e))
        if e[worst] > 20 * bound:
            errs.append(f"{name}: row {worst} of {rows_r.shape[0]}: its error {e[worst]:.2e} is above {20 * bound:.2e}")
    return errs


@dataclass
class ForwardCase:
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    config: str | None  # None: kgen's default for the shape
    batch: int = 1
    heads_q: int = 2
    heads_kv: int = 2
    n_q: int = 37
    n_k: int = 37
    seed: int = 0
    kv_pad: int = 0  # forward: K and V rows kv_pad elements longer than d (NaN there): stride_n = d + kv_pad

    def spec_text(self, op: str) -> str:
        """The spec as kgen prints it: "<op>.bf16.d128.causal"."""
        return f"{op}.{self.dtype}.d{self.head_dim}.{'causal' if self.causal else 'full'}"

    @property
    def name(self) -> str:
        return (f"{self.arch}.{self.spec_text('attention_fwd')[len('attention_fwd.'):]}."
                f"{self.config or 'default'}.b{self.batch}h{self.heads_q}:{self.heads_kv}.{self.n_q}x{self.n_k}"
                + (f".kvpad{self.kv_pad}" if self.kv_pad else ""))


def forward_grid(config: str, n_q: int, heads_q: int, batch: int) -> tuple[int, int, int]:
    """generator/attention_forward.cpp, attention_forward_grid: (ceil(n_q / rows), heads_q,
    batch), rows = query rows per block (simt: bm<warps> rows; mfma: bm<rows>)."""
    fields = dict((f[:2], f[2:]) for f in config.split(":")[1:])
    rows = int(fields["bm"])
    return ((n_q + rows - 1) // rows, heads_q, batch)


def _put(mem: emu.Memory, data: np.ndarray) -> int:
    addr = mem.alloc(data.nbytes)
    mem.put(addr, data)
    return addr


def _poisoned(mem: emu.Memory, count: int, dtype: str) -> int:
    """`count` elements of `dtype`, each the NaN pattern of docs/attention.md §5.3."""
    return _put(mem, np.full(count, NAN_BITS[dtype], np.uint32 if ELEM[dtype] == 4 else np.uint16))


def _read(mem: emu.Memory, addr: int, shape: tuple, dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    return from_bits(mem.get(addr, n * ELEM[dtype]).view(np.uint32 if ELEM[dtype] == 4 else np.uint16), dtype).reshape(shape)


def launch(kernel: Kernel, mem: emu.Memory, params: bytes, grid: tuple[int, int, int], hazards: bool = False) -> int:
    """Runs `kernel` over `grid` with `params` in its kernarg segment; returns the instructions run.
    hazards: with the emulator's probes (Dispatch.reverse and .poison)."""
    disp = load_dispatch(kernel, mem)
    disp.reverse = disp.poison = hazards
    if disp.kd.kernarg_size < len(params):
        raise RuntimeError(f"{kernel.variant}: kernarg segment of {disp.kd.kernarg_size} bytes holds no "
                           f"{len(params)}-byte parameter struct")
    ka_addr = mem.alloc(max(disp.kd.kernarg_size, len(params)))
    mem.put(ka_addr, params)
    disp.run(grid, (kernel.meta["threads"], 1, 1), ka_addr, dynamic_lds=kernel.meta["smem_bytes"])
    return disp.executed


def _inputs(case, rng):
    """q, k, v of `case` as dtype bits and their float64 values, and the q and k/v shapes."""
    d, dt = case.head_dim, case.dtype
    shape_q = (case.batch, case.heads_q, case.n_q, d)
    shape_kv = (case.batch, case.heads_kv, case.n_k, d)
    bits_ = [to_bits(rng.standard_normal(s), dt) for s in (shape_q, shape_kv, shape_kv)]
    return bits_, [from_bits(x, dt) for x in bits_], shape_q, shape_kv


def run_forward(kgen_bin: str, case: ForwardCase) -> dict:
    kernel = build_kernel(kgen_bin, case.arch, "attention_fwd", case.dtype, case.head_dim, case.causal, case.config)
    config = kernel.variant.split(".")[-1] if case.config is None else case.config
    if not kernel.variant.endswith(config):
        raise RuntimeError(f"built {kernel.variant}, expected config {config}")
    rng = np.random.default_rng(case.seed)
    d, dt = case.head_dim, case.dtype
    (q_bits, k_bits, v_bits), (q, k, v), shape_q, _ = _inputs(case, rng)
    scale = 1.0 / math.sqrt(d)
    o_ref, lse_ref = attention_reference(q, k, v, case.causal, scale)

    mem = emu.Memory()
    kv_n = d + case.kv_pad  # K and V row stride; the padding is NaN, which no kernel may read
    if case.kv_pad:
        def padded(x):
            out = np.full(x.shape[:-1] + (kv_n,), NAN_BITS[dt], dtype=x.dtype)
            out[..., :d] = x
            return out
        k_bits, v_bits = padded(k_bits), padded(v_bits)
    qa, ka, va = (_put(mem, x) for x in (q_bits, k_bits, v_bits))
    oa = _poisoned(mem, q_bits.size, dt)
    lse_n = case.batch * case.heads_q * case.n_q
    la = _poisoned(mem, lse_n, "fp32")
    params = pack_params("AttentionForwardParams", dict(
        q=qa, k=ka, v=va, o=oa, lse=la,
        q_stride_b=case.heads_q * case.n_q * d, q_stride_h=case.n_q * d, q_stride_n=d,
        k_stride_b=case.heads_kv * case.n_k * kv_n, k_stride_h=case.n_k * kv_n, k_stride_n=kv_n,
        v_stride_b=case.heads_kv * case.n_k * kv_n, v_stride_h=case.n_k * kv_n, v_stride_n=kv_n,
        o_stride_b=case.heads_q * case.n_q * d, o_stride_h=case.n_q * d, o_stride_n=d,
        lse_stride_b=case.heads_q * case.n_q, lse_stride_h=case.n_q,
        batch=case.batch, heads_q=case.heads_q, heads_kv=case.heads_kv, n_q=case.n_q, n_k=case.n_k,
        head_dim=d, head_group=case.heads_q // case.heads_kv, scale=scale, scale_log2=scale * math.log2(math.e)))
    executed = launch(kernel, mem, params, forward_grid(config, case.n_q, case.heads_q, case.batch))
    o = _read(mem, oa, shape_q, dt)
    lse = _read(mem, la, shape_q[:3], "fp32")
    errs = compare("o", o, o_ref, dt) + compare("lse", lse, lse_ref, dt, rows_are_values=True)
    return {"case": case.name, "variant": kernel.variant, "instructions": executed, "errors": errs}


# ---------------------------------------------------------------- attention backward
def attention_backward_reference(q, k, v, d_o, causal: bool, scale: float):
    """float64 dq, dk, dv (docs/attention.md §3): P = softmax of the masked scaled scores (a row
    that sees no key: P = 0), dP = dO·Vᵀ, D = Σ_j P∘dP, dS = P∘(dP − D), dQ = s·dS·K, dK = s·dSᵀ·Q,
    dV = Pᵀ·dO, dK and dV summed over the query heads of each kv group."""
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = hq // hkv
    kk, vv, _, visible, p = _softmax_terms(q, k, v, causal, scale)
    p = p / np.where(visible, p.sum(axis=-1, keepdims=True), 1)
    dp = np.einsum("bhid,bhjd->bhij", d_o, vv)
    ds = p * (dp - np.sum(p * dp, axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kk)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q).reshape(b, hkv, group, nk, d).sum(axis=2)
    dv = np.einsum("bhij,bhid->bhjd", p, d_o).reshape(b, hkv, group, nk, d).sum(axis=2)
    return dq, dk, dv


@dataclass
class BackwardCase(ForwardCase):
    """A backward call; config None: kgen's default (generator/attention_mfma.cpp) for the variant."""
    deterministic: bool = False

    @property
    def variant_key(self) -> str:
        """attention_backward_variant_key: the spec, plus ".deterministic" in that mode."""
        return self.spec_text("attention_bwd") + (".deterministic" if self.deterministic else "")

    @property
    def name(self) -> str:
        return (f"{self.arch}.{self.variant_key[len('attention_bwd.'):]}.{self.config or 'default'}."
                f"b{self.batch}h{self.heads_q}:{self.heads_kv}.{self.n_q}x{self.n_k}")


def config_fields(config: str) -> dict[str, int]:
    """'mfma:bm32:bn64:w2:c2' -> {'bm': 32, 'bn': 64, 'w': 2, 'c': 2} (path first, then fields)."""
    out = {}
    for f in config.split(":")[1:]:
        name = f.rstrip("0123456789")
        out[name] = int(f[len(name):]) if f[len(name):] else 1
    return out


def _blocks(n: int, rows: int) -> int:
    return (n + rows - 1) // rows


def backward_grid(kernel: Kernel, config: str, case: BackwardCase) -> tuple[int, int, int]:
    """generator/attention_backward.cpp, attention_backward_grid, for the MFMA path; the row
    kernels' and the dQ kernel's rows per block from kgen's headers (params_layout.cpp), their
    warps from the kernel's threads (attention_bwd::row_threads: 32 lanes per warp)."""
    name = kernel.meta["entry"].removeprefix("kgen_attention_bwd_")
    geometry = params_layout()
    hq, hkv, b = case.heads_q, case.heads_kv, case.batch
    if name in ("preprocess", "dq_convert"):
        rows = geometry["backward_rows"][f"{kernel.meta['threads'] // 32}:{case.head_dim}"]
        return (_blocks(case.n_q, rows[0 if name == "preprocess" else 1]), hq, b)
    if name in ("kv", "kv_atomic"):
        f = config_fields(config)
        return (_blocks(case.n_k, f["bn"]) * f.get("c", 1), hkv, b)
    if name == "dq":
        return (_blocks(case.n_q, geometry["mfma_dq_block_m"]), hq, b)
    if name in ("simt_dq", "simt_dkdv"):  # simt:w<rows>: one row (query or key) per warp
        rows = config_fields(config)["w"]
        return (_blocks(case.n_q if name == "simt_dq" else case.n_k, rows), hq if name == "simt_dq" else hkv, b)
    raise RuntimeError(f"no launch grid for the backward kernel {kernel.meta['entry']}")


BACKWARD_TENSORS = ("q", "k", "v", "o", "d_o", "dq", "dk", "dv", "gq", "gk", "gv", "q_bar", "k_bar", "v_bar", "do_bar")


def backward_params(tensors: dict, case: ForwardCase, rows: tuple[int, int, int], **fields) -> bytes:
    """AttentionBackwardParams: `tensors` maps a tensor to (address, (stride_b, stride_h, stride_n))
    (a tensor left out is null), `rows` = (batch, n_q, n_k) of the tensors (a packed batch: one batch
    of every sequence's rows), `fields` the workspace rows and lse; heads, head dim and the scale
    from `case` (scale 1/sqrt(d), as runtime/ops/attention_backward.cpp's base_params)."""
    scale = 1.0 / math.sqrt(case.head_dim)
    values = dict(fields, batch=rows[0], heads_q=case.heads_q, heads_kv=case.heads_kv, n_q=rows[1], n_k=rows[2],
                  head_dim=case.head_dim, head_group=case.heads_q // case.heads_kv, scale=scale,
                  scale_log2=scale * math.log2(math.e), stats_splits=0, dkv_accum=0)
    for t in BACKWARD_TENSORS:
        addr, strides = tensors.get(t, (0, (0, 0, 0)))
        values[f"{t}.data"] = addr
        for axis, stride in zip("bhn", strides):
            values[f"{t}.stride_{axis}"] = stride
    return pack_params("AttentionBackwardParams", values)


def run_backward(kgen_bin: str, case: BackwardCase, hazards: bool = False) -> dict:
    """One backward call as runtime/ops/attention_backward.cpp makes it: the kernels of
    attention_backward_kernels(config, deterministic) in order on one set of buffers, the workspace
    rows lse2, delta (and, with atomic dQ, dq_accum) NaN-poisoned like the outputs. hazards: every
    kernel with the emulator's hazard probes (launch)."""
    kernels = build_kernels(kgen_bin, case.arch, "attention_bwd", ["--variant", case.variant_key], case.config)
    names = [k.meta["entry"].removeprefix("kgen_attention_bwd_") for k in kernels]
    kv = [k for k, n in zip(kernels, names) if n in ("kv", "kv_atomic", "simt_dkdv")]
    if len(kv) != 1:
        raise RuntimeError(f"{case.variant_key}: expected one key-major kernel, kgen lists {names}")
    config = kv[0].variant.split(".")[-2]
    if case.config is not None and config != case.config:
        raise RuntimeError(f"built {kv[0].variant}, expected config {case.config}")
    atomic = "kv_atomic" in names
    if config.startswith("simt:"):  # attention_backward_kernels: the same three in both modes
        expected = ["preprocess", "simt_dkdv", "simt_dq"]
    else:
        expected = ["preprocess", "kv", "dq"] if case.deterministic else ["preprocess", "kv_atomic", "dq_convert"]
    if names != expected:
        raise RuntimeError(f"{case.variant_key}: kernels {names}, expected {expected}")

    rng = np.random.default_rng(case.seed)
    d, dt = case.head_dim, case.dtype
    (q_bits, k_bits, v_bits), (q, k, v), shape_q, shape_kv = _inputs(case, rng)
    do_bits = to_bits(rng.standard_normal(shape_q), dt)
    d_o = from_bits(do_bits, dt)
    scale = 1.0 / math.sqrt(d)
    o_ref, lse_ref = attention_reference(q, k, v, case.causal, scale)
    dq_ref, dk_ref, dv_ref = attention_backward_reference(q, k, v, d_o, case.causal, scale)

    mem = emu.Memory()
    qa, ka, va, oa, doa = (_put(mem, x) for x in (q_bits, k_bits, v_bits, to_bits(o_ref, dt), do_bits))
    la = _put(mem, lse_ref.astype(np.float32))
    dqa = _poisoned(mem, q_bits.size, dt)
    dka = _poisoned(mem, k_bits.size, dt)
    dva = _poisoned(mem, v_bits.size, dt)
    rows = case.batch * case.heads_q * case.n_q
    lse2 = _poisoned(mem, rows, "fp32")
    delta = _poisoned(mem, rows, "fp32")
    dq_accum = _poisoned(mem, rows * d, "fp32") if atomic else 0
    q_strides = (case.heads_q * case.n_q * d, case.n_q * d, d)
    kv_strides = (case.heads_kv * case.n_k * d, case.n_k * d, d)
    tensors = dict(q=(qa, q_strides), k=(ka, kv_strides), v=(va, kv_strides), o=(oa, q_strides),
                   d_o=(doa, q_strides), dq=(dqa, q_strides), dk=(dka, kv_strides), dv=(dva, kv_strides))
    params = backward_params(tensors, case, (case.batch, case.n_q, case.n_k), lse=la, lse_stride_b=case.heads_q * case.n_q,
                             lse_stride_h=case.n_q, lse2=lse2, delta=delta, row_r=0, row_c=0, dq_accum=dq_accum)
    executed = {}
    for kernel, name in zip(kernels, names):
        executed[name] = launch(kernel, mem, params, backward_grid(kernel, config, case), hazards)
    dq = _read(mem, dqa, shape_q, dt)
    dk = _read(mem, dka, shape_kv, dt)
    dv = _read(mem, dva, shape_kv, dt)
    errs = compare("dq", dq, dq_ref, dt) + compare("dk", dk, dk_ref, dt) + compare("dv", dv, dv_ref, dt)
    return {"case": case.name, "variant": kv[0].variant, "kernels": names, "instructions": executed, "errors": errs,
            "out": {"dq": dq, "dk": dk, "dv": dv}, "ref": {"dq": dq_ref, "dk": dk_ref, "dv": dv_ref}}


# ---------------------------------------------------------------- attention double backward
def attention_double_backward_reference(q, k, v, d_o, gq, gk, gv, causal: bool, scale: float):
    """float64 Q̄, K̄, V̄, dŌ (docs/attention.md §4) from the cotangents gQ, gK, gV of dQ, dK, dV:
    G = s·(gQ·Kᵀ + Q·gKᵀ), r = Σ_j P∘G, H = P∘(G − r), P̄ = dO·gVᵀ + G∘(dP − D) − r∘dP,
    c = Σ_j P∘P̄, S̄ = P∘(P̄ − c); Q̄ = s·(dS·gK + S̄·K), K̄ = s·(dSᵀ·gQ + S̄ᵀ·Q), V̄ = Hᵀ·dO,
    dŌ = P·gV + H·V, K̄ and V̄ summed over the query heads of each kv group."""
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = hq // hkv
    kk, vv, _, visible, p = _softmax_terms(q, k, v, causal, scale)
    p = p / np.where(visible, p.sum(axis=-1, keepdims=True), 1)
    gkk, gvv = np.repeat(gk, group, axis=1), np.repeat(gv, group, axis=1)

    def scores(a, c):
        return np.einsum("bhid,bhjd->bhij", a, c)

    def rows(m, x):  # m·x
        return np.einsum("bhij,bhjd->bhid", m, x)

    def keys(m, x):  # mᵀ·x, summed over each kv group
        return np.einsum("bhij,bhid->bhjd", m, x).reshape(b, hkv, group, nk, d).sum(axis=2)

    dp = scores(d_o, vv)
    dp_centred = dp - np.sum(p * dp, axis=-1, keepdims=True)
    ds = p * dp_centred
    g = scale * (scores(gq, kk) + scores(q, gkk))
    r = np.sum(p * g, axis=-1, keepdims=True)
    h = p * (g - r)
    p_bar = scores(d_o, gvv) + g * dp_centred - r * dp
    s_bar = p * (p_bar - np.sum(p * p_bar, axis=-1, keepdims=True))
    return (scale * (rows(ds, gkk) + rows(s_bar, kk)), scale * (keys(ds, gq) + keys(s_bar, q)), keys(h, d_o),
            rows(p, gvv) + rows(h, vv))


@dataclass
class DoubleBackwardCase(ForwardCase):
    """A double backward call (attention_double_bwd; on AMD its general path, simt_q and simt_kv after
    the backward's preprocess). seqlens: a packed batch of these (n_q, n_k) sequences
    (attention_varlen_double_backward; batch, n_q and n_k unused); absent: the cotangents left out
    (letters of "qkv": gQ, gK, gV)."""
    seqlens: tuple = ()
    absent: str = ""

    @property
    def variant_key(self) -> str:
        """double_backward_variant_key: the spec, ".packed" for a packed batch."""
        return self.spec_text("attention_double_bwd") + (".packed" if self.seqlens else "")

    @property
    def name(self) -> str:
        shape = ("packed" + "+".join(f"{a}x{b}" for a, b in self.seqlens) if self.seqlens
                 else f"b{self.batch}.{self.n_q}x{self.n_k}")
        return (f"{self.arch}.{self.variant_key[len('attention_double_bwd.'):]}.{self.config or 'default'}."
                f"h{self.heads_q}:{self.heads_kv}.{shape}" + (f".no_g{self.absent}" if self.absent else ""))


def _memory_layout(parts: list, packed: bool) -> np.ndarray:
    """Sequences' (1, h, n, d) arrays as the kernels read them: dense (b, h, n, d); packed (total, h,
    d), the (total, heads, head_dim) layout of attention_varlen_*."""
    if packed:
        return np.concatenate([np.moveaxis(x[0], 1, 0) for x in parts], axis=0)
    return np.concatenate(parts, axis=0)


def run_double_backward(kgen_bin: str, case: DoubleBackwardCase, hazards: bool = False) -> dict:
    """One double backward call as runtime/ops/attention_backward.cpp makes it: preprocess (the
    backward's row kernel), simt_q (r and c into the workspace, then Q̄ and dŌ), simt_kv (K̄, V̄), on
    one AttentionBackwardParams; the workspace rows lse2, delta, r, c and the four outputs start
    NaN-poisoned. A packed batch: the tensors' rows in one batch, the sequences' bounds in the
    VariantArgs after the params (the kernels but preprocess), grids of the longest sequence
    (attention_double_backward_grid) and, for preprocess, of the tensors' rows."""
    kernels = build_kernels(kgen_bin, case.arch, "attention_double_bwd", ["--variant", case.variant_key], case.config)
    names = [k.meta["entry"].removeprefix("kgen_attention_bwd_").removeprefix("kgen_attention_double_bwd_")
             for k in kernels]
    if names != ["preprocess", "simt_q", "simt_kv"]:
        raise RuntimeError(f"{case.variant_key}: kernels {names}, expected preprocess, simt_q, simt_kv")
    config = kernels[1].variant.split(".")[-2]
    if case.config is not None and config != case.config:
        raise RuntimeError(f"built {kernels[1].variant}, expected config {case.config}")
    packed = bool(case.seqlens)
    seqs = list(case.seqlens) if packed else [(case.n_q, case.n_k)] * case.batch
    rng = np.random.default_rng(case.seed)
    d, dt, hq, hkv = case.head_dim, case.dtype, case.heads_q, case.heads_kv
    scale = 1.0 / math.sqrt(d)

    # Per sequence (1, h, n, d): inputs as dtype bits, their float64 values, the references.
    names_in = ("q", "k", "v", "d_o", "gq", "gk", "gv")
    bits, ref = {n: [] for n in names_in + ("o",)}, {n: [] for n in ("q_bar", "k_bar", "v_bar", "do_bar", "lse")}
    for n_q, n_k in seqs:
        x = {}
        for n in names_in:
            shape = (1, hq if n in ("q", "d_o", "gq") else hkv, n_q if n in ("q", "d_o", "gq") else n_k, d)
            bits[n].append(to_bits(rng.standard_normal(shape), dt))
            x[n] = from_bits(bits[n][-1], dt)
        for n in case.absent:
            x["g" + n] = np.zeros_like(x["g" + n])
        o, lse = attention_reference(x["q"], x["k"], x["v"], case.causal, scale)
        bits["o"].append(to_bits(o, dt))
        ref["lse"].append(lse)
        for n, r in zip(("q_bar", "k_bar", "v_bar", "do_bar"), attention_double_backward_reference(
                x["q"], x["k"], x["v"], x["d_o"], x["gq"], x["gk"], x["gv"], case.causal, scale)):
            ref[n].append(r)

    mem = emu.Memory()
    total_q, total_k = sum(s[0] for s in seqs), sum(s[1] for s in seqs)
    if packed:  # packed_view: (total, h, d) with stride_b 0; lse (h, total_q)
        q_strides, kv_strides = (0, d, hq * d), (0, d, hkv * d)
        lse_bits = np.concatenate([x[0] for x in ref["lse"]], axis=1).astype(np.float32)
        lse_strides, rows = (0, total_q), (1, total_q, total_k)
    else:
        q_strides = (hq * case.n_q * d, case.n_q * d, d)
        kv_strides = (hkv * case.n_k * d, case.n_k * d, d)
        lse_bits = np.concatenate(ref["lse"], axis=0).astype(np.float32)
        lse_strides, rows = (hq * case.n_q, case.n_q), (case.batch, case.n_q, case.n_k)
    tensors, outputs = {}, {}
    for n in names_in + ("o",):
        if n[0] == "g" and n[1] in case.absent:
            continue  # a cotangent left out: null
        tensors[n] = (_put(mem, _memory_layout(bits[n], packed)), kv_strides if n in ("k", "v", "gk", "gv") else q_strides)
    for n in ("q_bar", "k_bar", "v_bar", "do_bar"):
        like = bits["k" if n in ("k_bar", "v_bar") else "q"]
        shape = _memory_layout(like, packed).shape
        outputs[n] = shape
        tensors[n] = (_poisoned(mem, int(np.prod(shape)), dt), kv_strides if n in ("k_bar", "v_bar") else q_strides)
    stat_rows = hq * total_q
    work = {n: _poisoned(mem, stat_rows, "fp32") for n in ("lse2", "delta", "row_r", "row_c")}
    params = backward_params(tensors, case, rows, lse=_put(mem, lse_bits), lse_stride_b=lse_strides[0],
                             lse_stride_h=lse_strides[1], dq_accum=0, **work)
    if packed:  # the VariantArgs after the params (entry_shim.cpp: the kernel's second parameter)
        va = params_layout()["VariantArgs"]
        cu = [np.concatenate([[0], np.cumsum([s[i] for s in seqs])]).astype(np.int32) for i in (0, 1)]
        args = pack_params("VariantArgs", {f[0]: 0 for f in va["fields"] if f[3] != "zeros"} |
                           dict(cu_seqlens_q=_put(mem, cu[0]), cu_seqlens_k=_put(mem, cu[1])))
        variant_params = params + bytes(-len(params) % va["align"]) + args
    w = config_fields(config)["w"]
    longest_q, longest_k = max(s[0] for s in seqs), max(s[1] for s in seqs)
    executed = {}
    for kernel, name in zip(kernels, names):
        if name == "preprocess":  # the tensors' rows, kRowWarps warps (the kernel's threads)
            pre_rows = params_layout()["backward_rows"][f"{kernel.meta['threads'] // 32}:{d}"][0]
            grid, kp = (_blocks(rows[1], pre_rows), hq, rows[0]), params
        else:
            n_rows, heads = (longest_q, hq) if name == "simt_q" else (longest_k, hkv)
            grid, kp = (_blocks(n_rows, w), heads, len(seqs)), variant_params if packed else params
        executed[name] = launch(kernel, mem, kp, grid, hazards)
    out, errs = {}, []
    for n, shape in outputs.items():
        out[n] = _read(mem, tensors[n][0], shape, dt)
        r = _memory_layout(ref[n], packed)
        ref[n] = r
        errs += compare(n, out[n], r, dt)
    return {"case": case.name, "variant": kernels[1].variant, "kernels": names, "instructions": executed,
            "errors": errs, "out": out, "ref": {n: ref[n] for n in outputs}}
