"""kgen inside other libraries' attention hooks, each opt-in and imported on its own:

- kgen.integrations.transformers: register() makes attn_implementation="kgen" run Hugging Face
  transformers models on kgen.torch.attention;
- kgen.integrations.torch_sdpa: activate() routes PyTorch SDPA's flash backend to kgen through
  torch.nn.attention's flash-attention registry (where the installed PyTorch has one).

Importing this package imports neither transformers nor PyTorch.
"""
