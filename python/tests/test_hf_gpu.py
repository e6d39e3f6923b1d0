"""GPU tests of kgen.integrations.transformers: small Llama, Qwen2 (a full and a sliding layer) and
Mistral (sliding window shorter than the sequence) models in bf16 with attn_implementation="kgen"
against the same weights with "sdpa": the forward's logits, one training step's loss and
gradients, and greedy generate() with a KV cache (prefill, then one-token decode steps past the
window). Each bf16 run is measured against an fp32 SDPA run of the same weights, and kgen's error
must stay within twice SDPA's bf16 error plus a floor. Every attention call must have run on kgen
(no fallback). Skipped unless PyTorch with CUDA, transformers and libkgen.so are available."""
import copy

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import kgen.torch  # noqa: E402
from kgen.integrations import transformers as kgen_hf  # noqa: E402
from kgen.testing import compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

LAYERS, BATCH, SEQ, WINDOW = 2, 2, 80, 16
FLOOR = 5e-3  # rel_l2 kgen may add beyond 2x SDPA's own bf16 error
# A whole bf16 model's logits and gradients are further from fp32 than one attention output (SDPA's
# gradients of the 2-layer models here: rel_l2 near 5e-2 on the CPU): the cosine bound of the
# model-level checks is looser than kgen.testing's per-kernel one, and the rel_l2 bound relative.
COS_BOUND = 0.99


def make_model(name: str):
    """(fp32 model, bf16 copy) of family `name` on CUDA, random weights (fixed seed), eval mode."""
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)
    common = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=LAYERS,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
                  initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    if name == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif name == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=True, sliding_window=WINDOW,
                                             max_window_layers=1))
    else:
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=WINDOW))
    model = model.cuda().eval()
    return model, copy.deepcopy(model).to(torch.bfloat16)


@pytest.fixture
def kgen_calls(monkeypatch):
    """kgen registered in transformers; the list of kgen.torch.attention calls (query shapes)."""
    kgen_hf.register()
    calls = []
    attention = kgen.torch.attention

    def counted(q, k, v, **keywords):
        calls.append(tuple(q.shape))
        return attention(q, k, v, **keywords)

    monkeypatch.setattr(kgen.torch, "attention", counted)
    return calls


def _input_ids(n, seed=1):
    return torch.randint(3, 512, (BATCH, n), generator=torch.Generator().manual_seed(seed)).cuda()


def _within_bf16(name, out, sdpa, reference):
    """kgen's bf16 `out` against the fp32 `reference`: within twice SDPA's bf16 error plus FLOOR."""
    sdpa_error = compare(f"{name} sdpa", sdpa, reference, bound=float("inf")).rel_l2
    check = compare(name, out, reference, bound=2 * sdpa_error + FLOOR, cos_bound=COS_BOUND)
    assert check.ok, f"{check} (sdpa bf16 rel_l2 {sdpa_error:.3g})"


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral"])
def test_forward_and_training_step(kgen_calls, name):
    reference_model, model = make_model(name)
    input_ids = _input_ids(SEQ)
    reference_model.set_attn_implementation("sdpa")
    reference_model.zero_grad()
    reference = reference_model(input_ids, labels=input_ids)
    reference.loss.backward()
    reference_loss = float(reference.loss.detach())
    runs = {}
    for implementation in ("sdpa", "kgen"):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        out = model(input_ids, labels=input_ids)
        out.loss.backward()
        runs[implementation] = (out.logits.detach(), out.loss.detach(),
                                {n: p.grad.clone() for n, p in model.named_parameters()})
    assert kgen_calls == [(BATCH, SEQ, 4, 64)] * LAYERS  # every layer on kgen, bnhd views
    (logits, loss, grads), (sdpa_logits, sdpa_loss, sdpa_grads) = runs["kgen"], runs["sdpa"]
    _within_bf16("logits", logits, sdpa_logits, reference.logits)
    assert abs(float(loss) - reference_loss) <= 2 * abs(float(sdpa_loss) - reference_loss) + 1e-2
    for n, p in reference_model.named_parameters():
        _within_bf16(f"grad {n}", grads[n], sdpa_grads[n], p.grad)


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral"])
def test_generate(kgen_calls, name):
    """Greedy generate() from a prompt longer than the window: each step's logits (with the KV
    cache) against the fp32 model's on the same tokens without a cache, and each chosen token
    the fp32 model's argmax up to the logit error bf16 allows."""
    reference_model, model = make_model(name)
    prompt, steps = _input_ids(40, seed=2), 8
    generated = {}
    for implementation in ("sdpa", "kgen"):
        model.set_attn_implementation(implementation)
        generated[implementation] = model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps,
                                                   do_sample=False, return_dict_in_generate=True,
                                                   output_logits=True)
    assert len(kgen_calls) == steps * LAYERS and all(shape[1] == 1 for shape in kgen_calls[LAYERS:])
    reference_model.set_attn_implementation("sdpa")
    errors = {}
    for implementation, out in generated.items():
        with torch.no_grad():  # the fp32 model's logits for the steps, teacher-forced on these tokens
            reference = reference_model(out.sequences[:, :-1]).logits[:, -steps:]
        logits = torch.stack(out.logits, dim=1)
        errors[implementation] = (logits, reference, out.sequences[:, -steps:])
    logits, reference, tokens = errors["kgen"]
    sdpa_logits, sdpa_reference, _ = errors["sdpa"]
    sdpa_error = compare("sdpa", sdpa_logits, sdpa_reference, bound=float("inf")).rel_l2
    check = compare("generate logits", logits, reference, bound=2 * sdpa_error + FLOOR, cos_bound=COS_BOUND)
    assert check.ok, f"{check} (sdpa bf16 rel_l2 {sdpa_error:.3g})"
    margin = reference.max(dim=-1).values - reference.gather(-1, tokens[..., None]).squeeze(-1)
    allowed = 4 * float((sdpa_logits.float() - sdpa_reference).abs().max()) + 1e-3
    assert float(margin.max()) <= allowed, f"kgen chose a token {float(margin.max()):.3g} below the argmax"


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_padded_batch_runs_packed(monkeypatch, name):
    """A left-padded batch: every layer runs kgen.torch.varlen_attention; the logits of the valid
    tokens and the gradients of a training step (padded labels ignored) against the fp32 model,
    within twice SDPA's bf16 error."""
    kgen_hf.register()
    varlen_calls = []
    varlen = kgen.torch.varlen_attention

    def counted(*args, **keywords):
        varlen_calls.append(tuple(args[0].shape))
        return varlen(*args, **keywords)

    monkeypatch.setattr(kgen.torch, "varlen_attention", counted)
    reference_model, model = make_model(name)
    input_ids = _input_ids(SEQ, seed=3)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :23] = 0
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    reference_model.set_attn_implementation("sdpa")
    reference_model.zero_grad()
    reference = reference_model(input_ids, attention_mask=attention_mask, labels=labels)
    reference.loss.backward()
    runs = {}
    for implementation in ("sdpa", "kgen"):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        runs[implementation] = (out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert varlen_calls == [(2 * SEQ - 23, 4, 64)] * LAYERS  # the valid tokens of both rows, packed
    valid = attention_mask.bool()
    (logits, grads), (sdpa_logits, sdpa_grads) = runs["kgen"], runs["sdpa"]
    _within_bf16("logits", logits[valid], sdpa_logits[valid], reference.logits[valid])
    for n, p in reference_model.named_parameters():
        _within_bf16(f"grad {n}", grads[n], sdpa_grads[n], p.grad)
