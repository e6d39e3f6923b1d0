"""The paged append and plan/run without a GPU (docs/attention.md §10): kgen.testing's rotary
reference against the two styles written out by hand, the append reference's page arithmetic,
torch.ops.kgen.paged_append's fake kernel, and the library naming the arguments it refuses."""
import pytest

torch = pytest.importorskip("torch")

import kgen.testing  # noqa: E402
import kgen.torch  # noqa: E402


def test_rotary_reference_rotates_halves_and_pairs():
    x = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(1, 1, 1, 6)  # d = 6, rotary_dim 4
    angle = torch.tensor([[0.0, 0.0], [0.3, 1.1]], dtype=torch.float64)
    cos, sin = angle.cos(), angle.sin()
    pos = torch.tensor([[1]])
    c0, c1, s0, s1 = cos[1, 0], cos[1, 1], sin[1, 0], sin[1, 1]
    halves = kgen.testing.rotary_reference(x, cos, sin, pos).flatten()
    want = torch.stack([1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1]).tolist() + [5.0, 6.0]
    assert torch.allclose(halves, torch.tensor(want, dtype=torch.float64))
    pairs = kgen.testing.rotary_reference(x, cos, sin, pos, interleaved=True).flatten()
    want = torch.stack([1 * c0 - 2 * s0, 2 * c0 + 1 * s0, 3 * c1 - 4 * s1, 4 * c1 + 3 * s1]).tolist() + [5.0, 6.0]
    assert torch.allclose(pairs, torch.tensor(want, dtype=torch.float64))


def test_append_reference_writes_through_the_table_and_drops_rows_past_it():
    k = torch.arange(1.0, 7.0).reshape(2, 3, 1, 1)  # b = 2, n_new = 3
    k_cache = torch.zeros(4, 2, 1, 1)  # 4 pages of 2 rows
    v_cache = k_cache.clone()
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    kgen.testing.paged_append_reference(k, k, k_cache, v_cache, table, torch.tensor([1, 2], dtype=torch.int32))
    # batch 0: positions 1, 2, 3 -> page 3 row 1, page 0 rows 0, 1; batch 1: positions 2, 3 -> page 2, 4 dropped.
    assert k_cache.flatten().tolist() == [2, 3, 0, 0, 4, 5, 0, 1]
    assert torch.equal(v_cache, k_cache)


def test_the_fake_kernel_and_the_library_name_the_arguments(kgen_library):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        k = torch.empty(2, 4, 2, 64, dtype=torch.bfloat16)
        cache = torch.empty(8, 16, 2, 64, dtype=torch.bfloat16)
        lens = torch.zeros(2, dtype=torch.int32)
        assert torch.ops.kgen.paged_append(k, k, cache, cache, None, lens) is None
        with pytest.raises(ValueError, match="^cache_seqlens: 2 dimensions"):
            torch.ops.kgen.paged_append(k, k, cache, cache, None, lens[None])
    k = torch.zeros(2, 4, 2, 64, dtype=torch.bfloat16)
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(kgen.torch.KgenError, match="^k_new: tensor is not in CUDA device memory"):
        kgen.torch.paged_append(k, k, cache, cache, None, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="plan"):
        kgen.torch.PagedAttention().run(k, cache, cache, None)
