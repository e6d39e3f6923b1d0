"""Training-step time of a 1B-class Hugging Face Llama model with each attention implementation.

    KGEN_LIBRARY=... PYTHONPATH=python python3 bench/hf_train_step.py --contexts 2k,8k \
        --impls kgen,sdpa,sdpa-cudnn,sdpa-flash,flash_attention_4

One model (random weights, bf16, fixed seed) and one batch of tokens per context; the same model
switches its attention implementation (`set_attn_implementation`) between measurements, in
interleaved rounds, so every implementation trains the same weights on the same tokens. A step is
forward with the loss, backward and a fused AdamW step. Before timing, each implementation's loss
and gradients on the first batch are compared with those of `sdpa` (no optimizer step).

Implementations: kgen (kgen.integrations.transformers, registered as "kgen"), sdpa (PyTorch's
backend choice), sdpa-cudnn and sdpa-flash (SDPA held to one backend with
torch.nn.attention.sdpa_kernel), and any name transformers' AttentionInterface knows, such as
flash_attention_4 (skipped, with the reason, where it cannot load).

Models: tinyllama (hidden 2048, 22 layers, 32 query and 4 key/value heads of d = 64, MLP 5632,
vocabulary 32000: 1.1B parameters) and llama-d128 (the same with 16 query and 4 key/value heads of
d = 128). Tokens per step are --tokens (batch = tokens / context).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rounds import size  # noqa: E402

MODELS = {
    "tinyllama": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, head_dim=64, vocab_size=32000),
    "llama-d128": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=128, vocab_size=32000),
}
SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION"}


def make_model(name: str, context: int, device: str):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(**MODELS[name], max_position_embeddings=max(context, 2048), rope_theta=10000.0,
                         tie_word_embeddings=False, initializer_range=0.02)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    return model.train()


def backend_context(impl: str):
    if impl in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[impl]))
    return contextlib.nullcontext()


def hf_name(impl: str) -> str:
    return "sdpa" if impl in SDPA_BACKENDS else impl


def usable(model, impl: str) -> str | None:
    """None when `impl` can run in this process, else why not."""
    try:
        model.set_attn_implementation(hf_name(impl))
    except Exception as error:  # noqa: BLE001 - transformers raises ImportError, ValueError, ...
        return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return None


def loss_and_grads(model, ids, impl: str):
    model.zero_grad(set_to_none=True)
    model.set_attn_implementation(hf_name(impl))
    with backend_context(impl):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    grads = [p.grad.float().flatten() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return loss.item(), torch.cat(grads)


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def time_steps(model, optimizer, ids, impl: str, steps: int, warmup: int, device: str) -> list[float]:
    model.set_attn_implementation(hf_name(impl))
    times = []
    with backend_context(impl):
        for i in range(warmup + steps):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--models", default="tinyllama", help=f"comma-separated, of {','.join(MODELS)}")
    p.add_argument("--contexts", default="2k,8k", help="context lengths (k suffix allowed)")
    p.add_argument("--tokens", type=size, default=16384, help="tokens per step (batch = tokens / context)")
    p.add_argument("--impls", default="kgen,sdpa,sdpa-cudnn,sdpa-flash,flash_attention_4")
    p.add_argument("--steps", type=int, default=8, help="timed steps per implementation and round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before each timed run")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the implementations")
    p.add_argument("--layers", type=int, help="override the model's layer count (smoke runs)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()

    impls = [i.strip() for i in a.impls.split(",") if i.strip()]
    if "kgen" in impls:
        import kgen.integrations.transformers as kgen_hf
        kgen_hf.register()
    if a.device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    import transformers
    print(f"transformers {transformers.__version__}; {a.tokens} tokens per step; {a.steps} timed steps after "
          f"{a.warmup} warm-up steps, {a.rounds} interleaved rounds; seconds per step (median)", flush=True)
    rows = []
    for name in a.models.split(","):
        if a.layers:
            MODELS[name]["num_hidden_layers"] = a.layers
        for context in map(size, a.contexts.split(",")):
            batch = max(1, a.tokens // context)
            model = make_model(name, context, a.device)
            params = sum(p.numel() for p in model.parameters())
            ids = torch.randint(3, MODELS[name]["vocab_size"], (batch, context),
                                generator=torch.Generator().manual_seed(context)).to(a.device)
            print(f"\n== {name} ({params / 1e9:.2f}B parameters), context {context}, batch {batch}", flush=True)
            ready = []
            for impl in impls:
                why = usable(model, impl)
                if why:
                    print(f"{impl}: skipped ({why})", flush=True)
                else:
                    ready.append(impl)
            ref = loss_and_grads(model, ids, "sdpa")
            for impl in list(ready):
                if impl == "sdpa":
                    continue
                try:
                    loss, grads = loss_and_grads(model, ids, impl)
                except Exception as error:  # noqa: BLE001 - an implementation that cannot run this shape
                    print(f"{impl}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:160]})", flush=True)
                    ready.remove(impl)
                    continue
                print(f"check {impl}: loss {loss:.5f} against sdpa's {ref[0]:.5f} (diff {abs(loss - ref[0]):.2e}), "
                      f"gradients rel_l2 {rel_l2(grads, ref[1]):.2e}", flush=True)
            del ref
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=a.device == "cuda")
            times = {impl: [] for impl in ready}
            for r in range(a.rounds):
                for impl in ready:
                    t = time_steps(model, optimizer, ids, impl, a.steps, a.warmup, a.device)
                    times[impl].append(statistics.median(t))
                    print(f"round {r + 1} {impl}: {statistics.median(t):.4f} s/step (min {min(t):.4f})", flush=True)
            for impl in ready:
                rows.append((name, context, batch, impl, times[impl]))
            del model, optimizer
            if a.device == "cuda":
                torch.cuda.empty_cache()

    print("\n| model | context | batch | implementation | s/step, each round | median | tokens/s | time ÷ kgen's |")
    print("|---|---|---|---|---|---|---|---|")
    for name, context, batch, impl, t in rows:
        med = statistics.median(t)
        kgen = [statistics.median(r[4]) for r in rows if r[:3] == (name, context, batch) and r[3] == "kgen"]
        ratio = f"{med / kgen[0]:.2f}" if kgen else "–"
        print(f"| {name} | {context} | {batch} | {impl} | {' / '.join(f'{x:.4f}' for x in t)} | {med:.4f} | "
              f"{batch * context / med:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
