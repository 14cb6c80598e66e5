#!/usr/bin/env python3
"""Writes multihead_attention_golden.txt and multihead_attention_module_state_dict.safetensors:
small fixed nn.MultiheadAttention problems and PyTorch's answers.

Each case builds a float64 nn.MultiheadAttention with fixed parameters and inputs (pseudo-random
multiples of 1/64, exact in float32) and records the parameters, query, key, value, the masks
(uint8 masks as 0/1, PyTorch's bool), the output, the attention weights (when asked for), and the
gradients of the loss sum(out * gy) + sum(weights * gw) with respect to the inputs and the
parameters. A causal case is computed with PyTorch's bool upper-triangle mask (the is_causal
argument of later PyTorch versions is a hint that needs that mask anyway); the C++ test passes
is_causal instead. Each case draws from its own seeded generator.

The module case saves a float32 module's state_dict as safetensors (through
make_normalization_golden.py's writer) with an input x and the self-attention output y for it.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_multihead_attention_golden.py
The C++ test (tests/unit/nn/multihead_attention_test.cpp) reads the files; it needs no Python.
Format of the text file: see tests/support/golden.hpp.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_normalization_golden import fixed, line, save_safetensors  # noqa: E402


def case(out, seed, name, e, h, q_shape, kv_shape, bias=True, batch_first=False, kpm=None, mask=None,
         need_weights=True, average=True, causal=False):
    """kpm and mask: None, ("bool", shape) or ("float", shape)."""
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first).double()
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(fixed(p.shape, gen))
    q = fixed(q_shape, gen).requires_grad_()
    k = fixed(kv_shape, gen).requires_grad_()
    v = fixed(kv_shape, gen).requires_grad_()

    def make_mask(spec):
        if spec is None:
            return None
        kind, shape = spec
        if kind == "float":
            return fixed(shape, gen)
        m = torch.rand(shape, generator=gen, dtype=torch.float64) < 0.3
        m[..., 0] = False  # every query keeps a key: no row of NaN
        return m

    key_padding_mask, attn_mask = make_mask(kpm), make_mask(mask)
    if causal:
        length, keys = q_shape[1] if batch_first else q_shape[0], kv_shape[1] if batch_first else kv_shape[0]
        attn_mask = torch.ones(length, keys, dtype=torch.bool).triu(1)
    y, w = mha(q, k, v, key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
               average_attn_weights=average)
    gy = fixed(y.shape, gen)
    loss = (y * gy).sum()
    gw = None
    if need_weights:
        gw = fixed(w.shape, gen)
        loss = loss + (w * gw).sum()
    loss.backward()
    header = "case %s embed_dim %d num_heads %d bias %d batch_first %d need_weights %d average %d causal %d" % (
        name, e, h, int(bias), int(batch_first), int(need_weights), int(average), int(causal))
    for tag, spec in (("kpm_bool", kpm), ("mask_bool", None if causal else mask)):
        if spec is not None:
            header += " %s %d" % (tag, int(spec[0] == "bool"))
    out.append(header)
    for pname, p in mha.named_parameters():
        out.append(line(pname, p.detach()))
    for tname, t in (("query", q), ("key", k), ("value", v)):
        out.append(line(tname, t.detach()))
    if key_padding_mask is not None:
        out.append(line("key_padding_mask", key_padding_mask.double()))
    if attn_mask is not None and not causal:
        out.append(line("attn_mask", attn_mask.double()))
    out.append(line("gy", gy))
    out.append(line("out", y.detach()))
    if need_weights:
        out.append(line("gw", gw))
        out.append(line("weights", w.detach()))
    for tname, t in (("g_query", q), ("g_key", k), ("g_value", v)):
        out.append(line(tname, t.grad))
    for pname, p in mha.named_parameters():
        out.append(line("g_" + pname, p.grad))


def module_case(out, seed):
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(8, 2)
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(fixed(p.shape, gen))
    mha.eval()
    x = fixed((5, 2, 8), gen).float()
    with torch.no_grad():
        y, _ = mha(x, x, x)
    save_safetensors(os.path.join(HERE, "multihead_attention_module_state_dict.safetensors"), mha.state_dict())
    out.append("case multihead_attention_module")
    out.append(line("x", x))
    out.append(line("y", y))


def main():
    out = []
    case(out, 1, "self_sequence_first", 8, 2, (5, 2, 8), (5, 2, 8))
    case(out, 2, "cross_batch_first_masks", 8, 4, (2, 3, 8), (2, 4, 8), batch_first=True, kpm=("bool", (2, 4)),
         mask=("float", (3, 4)), average=False)
    case(out, 3, "bool_mask_per_head_no_bias", 6, 3, (4, 2, 6), (4, 2, 6), bias=False, mask=("bool", (6, 4, 4)))
    case(out, 4, "causal_no_weights", 8, 2, (4, 2, 8), (4, 2, 8), need_weights=False, causal=True)
    case(out, 5, "causal_with_weights", 8, 2, (4, 2, 8), (6, 2, 8), causal=True)
    case(out, 6, "unbatched_float_padding", 4, 1, (3, 4), (5, 4), kpm=("float", (5,)))
    case(out, 7, "unbatched_heads_no_weights", 8, 4, (3, 8), (5, 8), need_weights=False, kpm=("bool", (5,)))
    module_case(out, 8)
    with open(os.path.join(HERE, "multihead_attention_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
