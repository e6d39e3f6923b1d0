"""GPU test of kgen.integrations.torch_sdpa: with kgen active, SDPA forced to its flash backend runs
kgen (counted) and its output and gradients meet the float64 reference within kgen's bf16 bounds.
Skipped unless PyTorch with CUDA and the flash-attention registry and libkgen.so are available."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen.integrations import torch_sdpa  # noqa: E402
from kgen.testing import REL_L2_BOUND, attention_math, compare  # noqa: E402

if not torch_sdpa.available():
    pytest.skip(f"torch {torch.__version__} has no flash-attention registry", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("kgen_library")


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_flash_backend_runs_kgen(monkeypatch, is_causal):
    from torch.nn.attention import SDPBackend, restore_flash_attention_impl, sdpa_kernel
    calls = []
    forward = kgen.torch.attention_forward
    monkeypatch.setattr(kgen.torch, "attention_forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 8, 300, 128, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for _ in range(3))
    d_o = torch.randn(2, 8, 300, 128, generator=g, device="cuda", dtype=torch.bfloat16)
    try:
        torch_sdpa.activate()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
            grads = torch.autograd.grad(out, (q, k, v), d_o)
    finally:
        restore_flash_attention_impl()
    assert calls, "SDPA's flash backend did not call kgen"
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = attention_math(q64, k64, v64, causal=is_causal)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), d_o.double())
    for name, x, r in zip(("o", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads)):
        check = compare(name, x, r, bound=REL_L2_BOUND[torch.bfloat16])
        assert check.ok, str(check)
