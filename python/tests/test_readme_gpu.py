"""The README's training example runs as written (two steps on random batches), and its loss
falls back to finite values on kgen's kernels. Skips without torch and a CUDA device."""
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parents[2] / "README.md"


def training_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    found = [b for b in blocks if "torch.optim.AdamW" in b and "kgen.torch.attention" in b]
    assert len(found) == 1, "README has one training example"
    return found[0]


def test_readme_has_the_training_example():
    assert "torch.compile" in training_example()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_readme_training_example_runs():
    torch._dynamo.reset()
    gen = torch.Generator(device="cuda").manual_seed(0)
    batches = [torch.randn(2, 96, 512, device="cuda", generator=gen) for _ in range(2)]
    scope = {"batches": batches}
    exec(compile(training_example(), str(README), "exec"), scope)  # noqa: S102 - the README's own code
    assert torch.isfinite(scope["loss"]).item()
    grads = [p.grad for p in scope["model"].parameters()]
    assert all(g is None for g in grads), "opt.zero_grad() ran after the last step"
