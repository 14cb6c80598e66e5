#!/usr/bin/env python3
"""Writes transformer_golden.txt: small fixed nn.TransformerEncoderLayer, nn.TransformerEncoder,
nn.TransformerDecoderLayer and nn.TransformerDecoder problems and PyTorch's answers.

Each case builds a float64 module with dropout 0 (in training mode, so that PyTorch takes its
plain path and gives gradients), fixed parameters and fixed inputs (pseudo-random multiples of
1/64), and records every parameter under its state_dict name, the inputs (src, or tgt and
memory), the masks under the forward's argument names (uint8 masks as 0/1, PyTorch's bool), the
output and the gradients of sum(out * gy) with respect to the inputs and every parameter. A causal
case is computed with PyTorch's bool upper-triangle mask; the C++ test passes is_causal (or
tgt_is_causal) instead. Each case draws from its own seeded generator.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_transformer_golden.py
The C++ test (tests/unit/nn/transformer_test.cpp) reads the file; it needs no Python.
Format: see tests/support/golden.hpp.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_normalization_golden import fixed, line  # noqa: E402


def case(out, seed, name, module, header, inputs, masks=(), causal=None):
    """inputs: (name, shape) pairs in the forward's order; masks: (argument, "bool" or "float",
    shape) triples; causal: the mask argument that gets the causal mask, and its (rows, columns)."""
    gen = torch.Generator().manual_seed(seed)
    module = module.double()
    module.train()
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(fixed(p.shape, gen))
    xs = [(n, fixed(s, gen).requires_grad_()) for n, s in inputs]
    kwargs = {}
    for arg, kind, shape in masks:
        if kind == "float":
            kwargs[arg] = fixed(shape, gen)
        else:
            m = torch.rand(shape, generator=gen, dtype=torch.float64) < 0.3
            m[..., 0] = False  # every query keeps a key: no row of NaN
            kwargs[arg] = m
    if causal is not None:
        arg, shape = causal
        kwargs[arg] = torch.ones(shape, dtype=torch.bool).triu(1)
    y = module(*[x for _, x in xs], **kwargs)
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append("case %s %s causal %d" % (name, header, int(causal is not None)))
    for pname, p in module.named_parameters():
        out.append(line(pname, p.detach()))
    for n, x in xs:
        out.append(line(n, x.detach()))
    for arg, _, _ in masks:
        out.append(line(arg, kwargs[arg].double()))
    out.append(line("gy", gy))
    out.append(line("out", y.detach()))
    for n, x in xs:
        out.append(line("g_" + n, x.grad))
    for pname, p in module.named_parameters():
        out.append(line("g_" + pname, p.grad))


def main():
    out = []
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    case(out, 1, "layer_post_norm_relu", layer, "d_model 8 nhead 2 ff 16 gelu 0 batch_first 0 norm_first 0",
         [("src", (5, 2, 8))], masks=[("src_key_padding_mask", "bool", (2, 5))])
    layer = torch.nn.TransformerEncoderLayer(8, 4, dim_feedforward=12, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    case(out, 2, "layer_pre_norm_gelu_batch_first", layer,
         "d_model 8 nhead 4 ff 12 gelu 1 batch_first 1 norm_first 1", [("src", (2, 4, 8))],
         masks=[("src_mask", "float", (4, 4))])
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, norm_first=True)
    stack = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    case(out, 3, "encoder_two_layers_norm_causal", stack,
         "d_model 8 nhead 2 ff 16 gelu 0 batch_first 0 norm_first 1 layers 2 norm 1", [("src", (4, 3, 8))],
         masks=[("src_key_padding_mask", "bool", (3, 4))], causal=("mask", (4, 4)))
    layer = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    case(out, 4, "decoder_layer_post_norm_causal", layer, "d_model 8 nhead 2 ff 16 gelu 0 batch_first 0 norm_first 0",
         [("tgt", (4, 2, 8)), ("memory", (5, 2, 8))], masks=[("memory_key_padding_mask", "bool", (2, 5))],
         causal=("tgt_mask", (4, 4)))
    layer = torch.nn.TransformerDecoderLayer(8, 4, dim_feedforward=12, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    stack = torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(8))
    case(out, 5, "decoder_two_layers_pre_norm_gelu_batch_first", stack,
         "d_model 8 nhead 4 ff 12 gelu 1 batch_first 1 norm_first 1 layers 2 norm 1",
         [("tgt", (2, 3, 8)), ("memory", (2, 4, 8))],
         masks=[("memory_mask", "float", (3, 4)), ("tgt_key_padding_mask", "bool", (2, 3))])
    with open(os.path.join(HERE, "transformer_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
