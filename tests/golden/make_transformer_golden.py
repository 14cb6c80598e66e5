#!/usr/bin/env python3
"""Writes transformer_golden.txt: small fixed nn.TransformerEncoderLayer and nn.TransformerEncoder
problems and PyTorch's answers.

Each case builds a float64 module with dropout 0 (in training mode, so that PyTorch takes its
plain path and gives gradients), fixed parameters and a fixed input (pseudo-random multiples of
1/64), and records every parameter under its state_dict name, the input, the masks (uint8 masks as
0/1, PyTorch's bool), the output and the gradients of sum(out * gy) with respect to the input and
every parameter. The causal case is computed with PyTorch's bool upper-triangle mask; the C++ test
passes is_causal instead. Each case draws from its own seeded generator.

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


def case(out, seed, name, module, header, src_shape, kpm_shape=None, float_mask=False, causal=False):
    gen = torch.Generator().manual_seed(seed)
    module = module.double()
    module.train()
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(fixed(p.shape, gen))
    src = fixed(src_shape, gen).requires_grad_()
    batch_first = "batch_first 1" in header
    length = src_shape[1] if batch_first else src_shape[0]
    kpm = None
    if kpm_shape is not None:
        kpm = torch.rand(kpm_shape, generator=gen, dtype=torch.float64) < 0.3
        kpm[..., 0] = False
    mask = fixed((length, length), gen) if float_mask else None
    if causal:
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
    y = module(src, mask=mask, src_key_padding_mask=kpm) if isinstance(module, torch.nn.TransformerEncoder) \
        else module(src, src_mask=mask, src_key_padding_mask=kpm)
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append("case %s %s causal %d" % (name, header, int(causal)))
    for pname, p in module.named_parameters():
        out.append(line(pname, p.detach()))
    out.append(line("src", src.detach()))
    if kpm is not None:
        out.append(line("src_key_padding_mask", kpm.double()))
    if float_mask:
        out.append(line("src_mask", mask))
    out.append(line("gy", gy))
    out.append(line("out", y.detach()))
    out.append(line("g_src", src.grad))
    for pname, p in module.named_parameters():
        out.append(line("g_" + pname, p.grad))


def main():
    out = []
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    case(out, 1, "layer_post_norm_relu", layer, "d_model 8 nhead 2 ff 16 gelu 0 batch_first 0 norm_first 0",
         (5, 2, 8), kpm_shape=(2, 5))
    layer = torch.nn.TransformerEncoderLayer(8, 4, dim_feedforward=12, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    case(out, 2, "layer_pre_norm_gelu_batch_first", layer,
         "d_model 8 nhead 4 ff 12 gelu 1 batch_first 1 norm_first 1", (2, 4, 8), float_mask=True)
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, norm_first=True)
    stack = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    case(out, 3, "encoder_two_layers_norm_causal", stack,
         "d_model 8 nhead 2 ff 16 gelu 0 batch_first 0 norm_first 1 layers 2 norm 1", (4, 3, 8), kpm_shape=(3, 4),
         causal=True)
    with open(os.path.join(HERE, "transformer_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
