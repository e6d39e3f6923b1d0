"""Deviceless tests of kgen.integrations.transformers: registration, the mask builder, and the
mapping of transformers' attention calls onto kgen.torch.attention's arguments (causal, window,
softcap, sinks, scale, GQA, the KV cache's alignment) and the fallbacks. kgen.torch.attention is
replaced by a float64 reference of its documented semantics (bottom-right causal, window=(left,
right), softcap, sinks), and small models built here from configs run on the CPU against
transformers' own SDPA attention (eager for softcap and sinks, which SDPA lacks). Skipped without
PyTorch or transformers."""
import logging
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kgen.torch  # noqa: E402
from kgen.integrations import transformers as kgen_hf  # noqa: E402

LAYERS, SEQ = 2, 12
SLIDING_WINDOW = 5  # < SEQ, so that the window cuts keys
ATOL, RTOL = 2e-5, 1e-4  # fp32 models: kgen's reference computes in float64, SDPA in float32


def reference_attention(q, k, v, *, causal=False, scale=None, layout="bhnd", window=None, softcap=0.0, sinks=None,
                        **variant):
    """kgen.torch.attention's documented semantics in float64 (differentiable): query i sits at key
    position i' = i + n_k - n_q; causal keeps j <= i'; window=(left, right) keeps
    i' - left <= j <= i' + right (-1 = open); softcap c: c·tanh(s / c); sinks join the denominator."""
    assert not variant, f"unexpected kgen keywords {sorted(variant)}"
    if layout == "bnhd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    b, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    assert h_q % h_kv == 0
    k = k.double().repeat_interleave(h_q // h_kv, dim=1)
    v = v.double().repeat_interleave(h_q // h_kv, dim=1)
    s = (q.double() @ k.transpose(-1, -2)) * (d ** -0.5 if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    position = torch.arange(n_q)[:, None] + (n_k - n_q)
    key = torch.arange(n_k)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    if causal:
        keep &= key <= position
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= key >= position - left
        if right >= 0:
            keep &= key <= position + right
    s = s.masked_fill(~keep, -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.double()[None, :, None, None].expand(b, h_q, n_q, 1)], dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    o = (p[..., :n_k] @ v).to(q.dtype)
    return o.transpose(1, 2).contiguous() if layout == "bnhd" else o


class Spy:
    """Stands in for kgen.torch.attention: records each call's keywords and runs the reference."""

    def __init__(self, implementation=reference_attention):
        self.calls = []
        self.implementation = implementation

    def __call__(self, q, k, v, **keywords):
        self.calls.append({**keywords, "shape_q": tuple(q.shape), "shape_k": tuple(k.shape)})
        return self.implementation(q, k, v, **keywords)


def reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **keywords):
    """kgen.torch.varlen_attention's documented semantics: each sequence's own rows through
    reference_attention (q (total_q, h, d); sequences with no queries give nothing)."""
    outs = []
    for i in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1]), int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        assert q1 - q0 <= max_seqlen_q and k1 - k0 <= max_seqlen_k
        if q1 > q0:
            outs.append(reference_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], layout="bnhd",
                                            **keywords)[0])
    return torch.cat(outs)


@pytest.fixture
def kgen_attention(monkeypatch):
    """kgen registered in transformers, running on the CPU through the reference; the Spy (its
    calls: kgen.torch.attention's and, with "varlen": True, varlen_attention's)."""
    spy = Spy()

    def record_varlen(q, k, v, *args, **keywords):
        spy.calls.append({**keywords, "shape_q": tuple(q.shape), "shape_k": tuple(k.shape), "varlen": True})
        return reference_varlen(q, k, v, *args, **keywords)
    monkeypatch.setattr(kgen.torch, "attention", spy)
    monkeypatch.setattr(kgen.torch, "varlen_attention", record_varlen)
    monkeypatch.setattr(kgen_hf, "DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(kgen_hf, "_logged_reasons", set())
    kgen_hf.register()
    return spy


def _common(**extra):
    return dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.2,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)


def make_model(name: str):
    """A small causal LM of family `name` (float32, eval mode, fixed seed), weights random."""
    from transformers import (Gemma2Config, Gemma2ForCausalLM, GptOssConfig, GptOssForCausalLM, LlamaConfig,
                              LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)
    torch.manual_seed(0)
    if name == "llama":
        model = LlamaForCausalLM(LlamaConfig(**_common()))
    elif name == "qwen2":  # layer 0 full attention, layer 1 a sliding window
        model = Qwen2ForCausalLM(Qwen2Config(**_common(use_sliding_window=True, sliding_window=SLIDING_WINDOW,
                                                       max_window_layers=1)))
        assert model.config.layer_types == ["full_attention", "sliding_attention"]
    elif name == "mistral":  # every layer a sliding window
        model = MistralForCausalLM(MistralConfig(**_common(sliding_window=SLIDING_WINDOW)))
    elif name == "gemma2":  # softcap on the scores, scale 1/sqrt(query_pre_attn_scalar), a sliding layer
        model = Gemma2ForCausalLM(Gemma2Config(**_common(sliding_window=SLIDING_WINDOW, attn_logit_softcapping=0.5,
                                                         final_logit_softcapping=None, query_pre_attn_scalar=24)))
    elif name == "gpt_oss":  # learned sinks, sliding and full layers, mixture of experts
        model = GptOssForCausalLM(GptOssConfig(**_common(sliding_window=SLIDING_WINDOW, num_local_experts=4,
                                                         num_experts_per_tok=2)))
        for layer in model.model.layers:
            torch.nn.init.normal_(layer.self_attn.sinks, std=1.0)
    else:
        raise ValueError(name)
    return model.eval()


def _reference_implementation(name: str) -> str:
    return "eager" if name in ("gemma2", "gpt_oss") else "sdpa"  # SDPA has neither softcap nor sinks


def _layer_kinds(model) -> list[str]:
    if isinstance(model, transformers.MistralForCausalLM):
        return ["sliding_attention"] * LAYERS
    return getattr(model.config, "layer_types", None) or ["full_attention"] * LAYERS


def _logits(model, implementation, input_ids, **kwargs):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(input_ids, **kwargs).logits


def _input_ids(batch=2, n=SEQ, seed=1):
    return torch.randint(3, 97, (batch, n), generator=torch.Generator().manual_seed(seed))


def test_register_adds_attention_and_mask_functions(kgen_attention):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert kgen_hf.register("kgen_test") == "kgen_test"
    assert AttentionInterface._global_mapping["kgen_test"] is kgen_hf.attention_forward
    assert AttentionMaskInterface._global_mapping["kgen_test"] is kgen_hf.build_mask
    model = make_model("llama")
    model.set_attn_implementation("kgen_test")
    assert model.config._attn_implementation == "kgen_test"


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "gemma2", "gpt_oss"])
def test_forward_and_gradients_match_transformers(kgen_attention, name):
    """Logits and every parameter's gradient of a loss equal the reference implementation's, and
    every layer ran on kgen (no fallback) with the keywords the layer's kind calls for."""
    model = make_model(name)
    input_ids = _input_ids()
    reference = _logits(model, _reference_implementation(name), input_ids)
    logits = _logits(model, "kgen", input_ids)
    torch.testing.assert_close(logits, reference, atol=ATOL, rtol=RTOL)
    assert len(kgen_attention.calls) == LAYERS

    for call, kind in zip(kgen_attention.calls, _layer_kinds(model)):
        assert call["causal"] is True and call["layout"] == "bnhd"
        assert call.get("window") == ((SLIDING_WINDOW - 1, 0) if kind == "sliding_attention" else None)
        assert call["shape_q"] == (2, SEQ, 4, 16) and call["shape_k"] == (2, SEQ, 2, 16)  # GQA kept
    if name == "gemma2":
        assert all(call["softcap"] == 0.5 and call["scale"] == 24 ** -0.5 for call in kgen_attention.calls)
    if name == "gpt_oss":
        assert all(call["sinks"].dtype == torch.float32 for call in kgen_attention.calls)

    grads = {}
    for implementation in (_reference_implementation(name), "kgen"):
        model.zero_grad()
        model.set_attn_implementation(implementation)
        model(input_ids, labels=input_ids).loss.backward()
        grads[implementation] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    reference_grads = grads[_reference_implementation(name)]
    assert reference_grads.keys() == grads["kgen"].keys()
    for parameter, grad in grads["kgen"].items():
        torch.testing.assert_close(grad, reference_grads[parameter], atol=ATOL, rtol=RTOL, msg=parameter)


def test_window_off_by_one_fails(kgen_attention):
    """The comparison can fail: a window one key wider than transformers' changes the logits."""
    model = make_model("mistral")
    input_ids = _input_ids()
    reference = _logits(model, "sdpa", input_ids)

    def wider(q, k, v, window=None, **keywords):
        return reference_attention(q, k, v, window=(window[0] + 1, window[1]), **keywords)

    kgen_attention.implementation = wider
    logits = _logits(model, "kgen", input_ids)
    assert not torch.allclose(logits, reference, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "gemma2", "gpt_oss"])
def test_generate_matches_transformers(kgen_attention, name):
    """Greedy generate() with a KV cache past the window: prefill and one-token decode steps
    (n_q < n_k, bottom-right) give the reference implementation's tokens and logits."""
    model = make_model(name)
    prompt = _input_ids(batch=2, n=9)
    out = {}
    for implementation in (_reference_implementation(name), "kgen"):
        model.set_attn_implementation(implementation)
        out[implementation] = model.generate(prompt, max_new_tokens=6, do_sample=False, min_new_tokens=6,
                                             return_dict_in_generate=True, output_logits=True)
    reference = out[_reference_implementation(name)]
    assert torch.equal(out["kgen"].sequences, reference.sequences)
    for step, (logits, expected) in enumerate(zip(out["kgen"].logits, reference.logits)):
        torch.testing.assert_close(logits, expected, atol=ATOL, rtol=RTOL, msg=f"step {step}")
    assert len(kgen_attention.calls) == 6 * LAYERS
    assert all(call["shape_q"][1] == 1 for call in kgen_attention.calls[LAYERS:])  # decode steps


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")
def test_chunked_prefill_with_cache_is_bottom_right(kgen_attention):
    """Several new tokens over a filled cache (n_q > 1, n_k > n_q): kgen's bottom-right causal
    mask with no mask tensor, as transformers' own mask says."""
    from transformers import DynamicCache
    for name in ("llama", "mistral"):
        model = make_model(name)
        input_ids = _input_ids(batch=2, n=SEQ)
        logits = {}
        for implementation in ("sdpa", "kgen"):
            model.set_attn_implementation(implementation)
            cache = DynamicCache(config=model.config)
            with torch.no_grad():
                model(input_ids[:, :7], past_key_values=cache, use_cache=True)
                logits[implementation] = model(input_ids[:, 7:], past_key_values=cache, use_cache=True).logits
        torch.testing.assert_close(logits["kgen"], logits["sdpa"], atol=ATOL, rtol=RTOL)
    assert kgen_attention.calls[-1]["shape_q"][1] == 5 and kgen_attention.calls[-1]["causal"] is True


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt_oss"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_run_as_packed_batches(kgen_attention, caplog, name, side):
    """A padded batch (one run of tokens per row) runs on kgen.torch.varlen_attention: the logits of
    the valid tokens match SDPA's (eager's for gpt-oss's sinks), and generate() (left padding)
    gives the same tokens, with no fallback logged."""
    model = make_model(name)
    input_ids = _input_ids()
    attention_mask = torch.ones_like(input_ids)
    if side == "left":
        attention_mask[0, :4] = 0
        valid = (slice(0, 1), slice(4, None))
    else:
        attention_mask[1, SEQ - 3:] = 0
        valid = (slice(1, 2), slice(0, SEQ - 3))
    reference_name = "eager" if name == "gpt_oss" else "sdpa"
    reference = _logits(model, reference_name, input_ids, attention_mask=attention_mask)
    with caplog.at_level(logging.WARNING, logger="kgen.integrations.transformers"):
        logits = _logits(model, "kgen", input_ids, attention_mask=attention_mask)
    full = 1 - valid[0].start  # the row without padding
    torch.testing.assert_close(logits[valid], reference[valid], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(logits[full], reference[full], atol=ATOL, rtol=RTOL)
    assert kgen_attention.calls and all(call.get("varlen") for call in kgen_attention.calls)
    assert not [r for r in caplog.records if r.name == "kgen.integrations.transformers"]
    if side == "left":
        sequences = {}
        for implementation in (reference_name, "kgen"):
            model.set_attn_implementation(implementation)
            sequences[implementation] = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3,
                                                       do_sample=False)
        assert torch.equal(sequences["kgen"], sequences[reference_name])


def test_padding_with_holes_falls_back_to_sdpa_with_one_log_line(kgen_attention, caplog):
    """Padding that splits a row's tokens into two runs runs on SDPA with its mask, logged once."""
    model = make_model("llama")
    input_ids = _input_ids()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 5:7] = 0
    reference = _logits(model, "sdpa", input_ids, attention_mask=attention_mask)
    with caplog.at_level(logging.WARNING, logger="kgen.integrations.transformers"):
        logits = _logits(model, "kgen", input_ids, attention_mask=attention_mask)
    torch.testing.assert_close(logits[1], reference[1], atol=ATOL, rtol=RTOL)
    assert not kgen_attention.calls
    records = [r for r in caplog.records if r.name == "kgen.integrations.transformers"]
    assert len(records) == 1 and "padding" in records[0].getMessage()


def test_unpadded_mask_stays_on_kgen(kgen_attention):
    """An all-ones 2-d attention mask (what a tokenizer returns) is no reason to fall back."""
    model = make_model("qwen2")
    input_ids = _input_ids()
    ones = torch.ones_like(input_ids)
    torch.testing.assert_close(_logits(model, "kgen", input_ids, attention_mask=ones),
                               _logits(model, "sdpa", input_ids, attention_mask=ones), atol=ATOL, rtol=RTOL)
    assert len(kgen_attention.calls) == LAYERS


@pytest.mark.parametrize("reason", ["dropout", "float64", "output_attentions"])
def test_other_fallbacks(kgen_attention, caplog, reason):
    """Dropout in training, an unsupported dtype and output_attentions run on transformers'
    attention with the causal and window mask kgen would have applied, logged once."""
    model = make_model("mistral")
    input_ids = _input_ids()
    if reason == "float64":
        model = model.double()
    expected = _logits(model, "sdpa", input_ids)
    keywords = {}
    if reason == "dropout":  # p = 1 - 1e-9 would zero the output: check the fallback saw the dropout
        for layer in model.model.layers:
            layer.self_attn.attention_dropout = 0.5
        model.train()
    if reason == "output_attentions":
        keywords["output_attentions"] = True
    model.set_attn_implementation("kgen")
    with caplog.at_level(logging.WARNING, logger="kgen.integrations.transformers"):
        torch.manual_seed(3)
        with torch.no_grad():
            out = model(input_ids, **keywords)
    assert not kgen_attention.calls
    records = [r for r in caplog.records if r.name == "kgen.integrations.transformers"]
    assert len(records) == 1
    if reason == "dropout":
        model.set_attn_implementation("sdpa")
        torch.manual_seed(3)
        with torch.no_grad():
            dropped = model(input_ids).logits
        torch.testing.assert_close(out.logits, dropped, atol=ATOL, rtol=RTOL)  # the same dropout draws
        assert not torch.allclose(out.logits, expected, atol=ATOL, rtol=RTOL)
    else:
        torch.testing.assert_close(out.logits, expected, atol=ATOL, rtol=RTOL)
    if reason == "output_attentions":
        assert len(out.attentions) == LAYERS and out.attentions[0].shape == (2, 4, SEQ, SEQ)
        assert torch.all(out.attentions[0][..., :SLIDING_WINDOW - 1].triu(1) == 0)  # causal weights


class _Module(torch.nn.Module):
    """What transformers' attention functions read off an attention module."""

    def __init__(self, is_causal, groups):
        super().__init__()
        self.is_causal, self.num_key_value_groups = is_causal, groups


@pytest.mark.parametrize("is_causal", [True, False])
def test_attention_function_against_sdpa_attention_forward(kgen_attention, is_causal):
    """attention_forward against transformers' sdpa_attention_forward on random tensors, mask None:
    non-square (n_q < n_k, a KV cache), GQA, a scale; the output is (b, n, h, d) contiguous."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 1, 16, generator=g)
    k, v = torch.randn(2, 2, 9, 16, generator=g), torch.randn(2, 2, 9, 16, generator=g)
    module = _Module(is_causal, 2)
    out, weights = kgen_hf.attention_forward(module, q, k, v, None, scaling=0.3)
    expected, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.3)
    assert weights is None and out.shape == (2, 1, 4, 16) and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)
    # n_q = n_k: causal (top-left = bottom-right) or not, as the module says
    q = torch.randn(2, 4, 9, 16, generator=g)
    out, _ = kgen_hf.attention_forward(module, q, k, v, None)
    expected, _ = sdpa_attention_forward(module, q, k, v, None)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)
    assert [call["causal"] for call in kgen_attention.calls] == [is_causal] * 2


@pytest.mark.parametrize("n_q", [1, 4, 11])
def test_sliding_window_argument_against_the_transformers_mask(kgen_attention, n_q):
    """A call with no mask and sliding_window=w (how FlashAttention's path gets it) keeps the keys
    of transformers' sliding-window mask, kv_idx > q_idx - w, for the last n_q of 11 tokens."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function
    g = torch.Generator().manual_seed(6)
    q = torch.randn(1, 4, n_q, 16, generator=g)
    k, v = torch.randn(1, 2, 11, 16, generator=g), torch.randn(1, 2, 11, 16, generator=g)
    module = _Module(True, 2)
    mask = sdpa_mask(batch_size=1, q_length=n_q, kv_length=11, q_offset=11 - n_q,
                     mask_function=sliding_window_causal_mask_function(3), allow_is_causal_skip=False)
    expected, _ = sdpa_attention_forward(module, q, k, v, mask)
    out, _ = kgen_hf.attention_forward(module, q, k, v, None, sliding_window=3)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)
    assert kgen_attention.calls[-1]["window"] == (2, 0)


def test_build_mask(kgen_attention):
    """None for plain causal masks; a remembered mask for a sliding window that cuts keys; the
    SDPA mask, not remembered, for padding, a static cache's offsets and chunked attention."""
    from transformers import MistralConfig
    from transformers.masking_utils import causal_mask_function
    config = MistralConfig(**_common(sliding_window=SLIDING_WINDOW))
    common = dict(batch_size=2, mask_function=causal_mask_function, config=config, device="cpu")
    assert kgen_hf.build_mask(q_length=8, kv_length=8, **common) is None
    assert kgen_hf.build_mask(q_length=3, kv_length=11, q_offset=8, **common) is None  # prefill over a cache
    assert kgen_hf.build_mask(q_length=5, kv_length=5, local_size=SLIDING_WINDOW, **common) is None  # cuts none
    mask = kgen_hf.build_mask(q_length=8, kv_length=8, local_size=SLIDING_WINDOW + 1, **common)  # not the config's
    assert mask is not None and kgen_hf._plain_sliding_window(mask, 8, 8) is None
    mask = kgen_hf.build_mask(q_length=8, kv_length=8, local_size=SLIDING_WINDOW, **common)
    assert mask is not None and kgen_hf._plain_sliding_window(mask, 8, 8) == SLIDING_WINDOW
    assert kgen_hf._plain_sliding_window(mask, 7, 8) is None
    # a sliding cache: 4 cached keys at positions 4..7, 1 new query at 8, window 5
    mask = kgen_hf.build_mask(q_length=2, kv_length=6, q_offset=8, kv_offset=4, local_size=SLIDING_WINDOW, **common)
    assert kgen_hf._plain_sliding_window(mask, 2, 6) == SLIDING_WINDOW
    padding = torch.ones(2, 8, dtype=torch.bool)
    assert kgen_hf.build_mask(q_length=8, kv_length=8, attention_mask=padding, **common) is None
    padding[1, 0] = False
    mask = kgen_hf.build_mask(q_length=8, kv_length=8, attention_mask=padding, **common)
    assert mask is not None and not mask[1, 0, :, 0].any() and kgen_hf._plain_sliding_window(mask, 8, 8) is None
    mask = kgen_hf.build_mask(q_length=8, kv_length=16, **common)  # a static cache: keys past the last query
    assert mask is not None and kgen_hf._plain_sliding_window(mask, 8, 16) is None
    config.attention_chunk_size = SLIDING_WINDOW
    mask = kgen_hf.build_mask(q_length=8, kv_length=8, local_size=SLIDING_WINDOW, **common)
    assert kgen_hf._plain_sliding_window(mask, 8, 8) is None
    mask = kgen_hf.build_mask(q_length=8, kv_length=8, allow_is_causal_skip=False, **common)
    assert mask is not None and kgen_hf._plain_sliding_window(mask, 8, 8) is None


def test_import_without_transformers_is_lazy():
    """kgen.integrations imports neither transformers nor torch; the transformers module imports
    transformers only in register()."""
    import subprocess
    import sys
    code = ("import sys; import kgen.integrations; assert 'torch' not in sys.modules; "
            "import kgen.integrations.transformers; assert 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=kgen_hf.__file__.rsplit("/kgen/", 1)[0])
