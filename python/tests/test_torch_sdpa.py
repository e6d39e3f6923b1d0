"""Deviceless tests of kgen.integrations.torch_sdpa: registration in torch.nn.attention's
flash-attention registry (activate, restore), and the flash operator's forward mapping (layout,
scale, GQA, SDPA's top-left causal mask) with kgen.torch.attention_forward replaced by a float64
reference of its documented semantics, against SDPA's math on the CPU. Skipped without PyTorch or
without the registry (PyTorch before 2.11)."""
import math

import pytest

torch = pytest.importorskip("torch")

import kgen.torch  # noqa: E402
from kgen.integrations import torch_sdpa  # noqa: E402

if not torch_sdpa.available():
    pytest.skip(f"torch {torch.__version__} has no flash-attention registry", allow_module_level=True)


def reference_forward(q, k, v, *, causal=False, scale=None, layout="bhnd", out=None, return_lse=False,
                      causal_top_left=False):
    """kgen.torch.attention_forward's semantics in float64: causal keeps j <= i + n_k - n_q,
    causal_top_left keeps j <= i; writes `out`, returns (out, lse)."""
    assert layout == "bhnd" and return_lse
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    s = (q.double() @ k.transpose(-1, -2)) * (d ** -0.5 if scale is None else scale)
    row, column = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    if causal:
        s = s.masked_fill(column > row + n_k - n_q, -math.inf)
    if causal_top_left:
        s = s.masked_fill(column > row, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    out.copy_(torch.softmax(s, dim=-1).nan_to_num(0.0) @ v)
    return out, lse.float()


@pytest.mark.parametrize("n_q, n_k", [(7, 7), (5, 9), (9, 5)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_forward_matches_sdpa_math(monkeypatch, n_q, n_k, is_causal):
    monkeypatch.setattr(kgen.torch, "attention_forward", reference_forward)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, n_q, 16, generator=g)
    k, v = torch.randn(2, 2, n_k, 16, generator=g), torch.randn(2, 2, n_k, 16, generator=g)
    out, lse, cum_q, cum_k, max_q, max_k, *_ = torch_sdpa.flash_forward(q, k, v, 0.0, is_causal, scale=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3,
                                                                enable_gqa=True)
    rows = slice(None) if not is_causal or n_q <= n_k else slice(0, n_k)  # SDPA's fully masked rows: NaN
    torch.testing.assert_close(out[:, :, rows], expected[:, :, rows], atol=1e-5, rtol=1e-5)
    assert (out.shape, lse.shape, lse.dtype, max_q, max_k) == (q.shape, (2, 4, n_q), torch.float32, n_q, n_k)
    assert cum_q is None and cum_k is None


def test_flash_refuses_dropout():
    q = torch.zeros(1, 1, 4, 16)
    with pytest.raises(RuntimeError, match="dropout_p"):
        torch_sdpa.flash_forward(q, q, q, 0.1, False)


def test_activate_and_restore():
    """activate() makes "kgen" the current flash implementation; restore gives PyTorch's back."""
    attention = torch.nn.attention
    try:
        torch_sdpa.activate()
        assert "kgen" in attention.list_flash_attention_impls()
        assert attention.current_flash_attention_impl() == "kgen"
    finally:
        attention.restore_flash_attention_impl()
    assert attention.current_flash_attention_impl() is None
