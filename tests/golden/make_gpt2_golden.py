#!/usr/bin/env python3
"""Writes gpt2_golden.txt and gpt2_tiny_nanogpt.safetensors: a tiny GPT-2 written as nanoGPT's
model.py writes it (2 layers, 4 heads, width 32, vocabulary 64, block 16, with biases), its
state_dict with fixed weights, and PyTorch's logits, loss and some gradients for fixed ids.

The model is nanoGPT's (model.py of karpathy/nanoGPT) without dropout and with attention by hand
(softmax of q k^T / sqrt(D) under the causal mask), as nanoGPT computes it where PyTorch has no
F.scaled_dot_product_attention (1.13 has none); the MLP's GELU is the tanh approximation. The
head is tied to transformer.wte.weight, so the state_dict holds lm_head.weight equal to it, and
nanoGPT's causal-mask buffers transformer.h.<i>.attn.bias: the file keeps both, as nanoGPT saves
them, for the C++ test of gpt2_from_nanogpt.

Weights are float32 draws (embeddings N(0, 0.5), Linear weights N(0, 0.15), biases N(0, 0.05),
LayerNorm weights 1 + N(0, 0.1)): larger than nanoGPT's initialisation, so that every layer moves
the logits. The reference runs in float64 on those float32 values. The loss is the mean cross
entropy of the logits against the targets; gradients are of that loss.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_gpt2_golden.py
The C++ test (tests/unit/models/gpt2_test.cpp) reads the files; it needs no Python.
Format of the text file: see tests/support/golden.hpp.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from make_normalization_golden import save_safetensors  # the script's folder is on the import path

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, BLOCK, LAYERS, HEADS, EMBD = 64, 16, 2, 4, 32
BATCH, T = 2, 12
GRADS = ("transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
         "transformer.h.0.attn.c_attn.bias", "transformer.h.1.attn.c_proj.weight", "transformer.h.1.mlp.c_fc.bias",
         "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight", "transformer.ln_f.bias")


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(EMBD, 4 * EMBD)
        self.c_proj = nn.Linear(4 * EMBD, EMBD)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD),
            wpe=nn.Embedding(BLOCK, EMBD),
            h=nn.ModuleList([Block() for _ in range(LAYERS)]),
            ln_f=nn.LayerNorm(EMBD),
        ))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def line(name, t):
    t = torch.as_tensor(t)
    if t.dim() == 0:
        t = t.reshape(1)
    dims = ",".join(str(d) for d in t.shape)
    # 10 significant digits: far below the float32 tolerances of the test, and a smaller file.
    return name + " " + dims + " " + " ".join("%.10g" % float(v) for v in t.reshape(-1).tolist())


def main():
    gen = torch.Generator().manual_seed(2019)
    model = GPT()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                value = torch.randn(p.shape, generator=gen) * 0.5
            elif "ln_" in name and name.endswith(".weight"):
                value = 1 + torch.randn(p.shape, generator=gen) * 0.1
            elif name.endswith(".weight"):
                value = torch.randn(p.shape, generator=gen) * 0.15
            else:
                value = torch.randn(p.shape, generator=gen) * 0.05
            p.copy_(value.float())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    save_safetensors(os.path.join(HERE, "gpt2_tiny_nanogpt.safetensors"), state)

    ids = torch.randint(0, VOCAB, (BATCH, T), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, T), generator=gen)
    model = model.double()
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    params = dict(model.named_parameters())
    out = ["case gpt2 vocab_size %d block_size %d n_layer %d n_head %d n_embd %d" % (VOCAB, BLOCK, LAYERS, HEADS,
                                                                                      EMBD)]
    out.append(line("ids", ids))
    out.append(line("targets", targets))
    out.append(line("logits", logits.detach()))
    out.append(line("loss", loss.detach()))
    for name in GRADS:
        out.append(line("grad:" + name, params[name].grad))
    with open(os.path.join(HERE, "gpt2_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
