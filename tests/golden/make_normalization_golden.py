#!/usr/bin/env python3
"""Writes normalization_golden.txt and the *_state_dict.safetensors files beside it: small fixed
layer-norm, group-norm and BatchNorm1d problems and PyTorch's answers, and PyTorch modules' state_dicts with an input and the
module's output for it.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64. Op cases hold x, the affine parameters (absent when undefined), an output gradient gy,
and y, gx, gw, gb for the loss sum(y * gy). Each case draws from its own seeded generator, so
adding a case leaves the others' numbers as they were.

Module cases: a float32 PyTorch module with fixed parameters is saved with its state_dict as
safetensors (written here by hand: the format is an 8-byte little-endian header length, a JSON
header of dtype, shape and byte range per tensor, then the raw little-endian bytes), and the text
file holds an input and the module's float32 output for it.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_normalization_golden.py
The C++ test (tests/unit/autograd/ops/normalization_test.cpp) reads the files; it needs no Python.
Format of the text file: see tests/support/golden.hpp.
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def op_case(out, seed, header, shape, param_shape, affine, bias, f):
    """x of shape, weight and bias of param_shape (each None when absent), y = f(x, w, b), and the
    gradients of sum(y * gy)."""
    gen = torch.Generator().manual_seed(seed)
    x = fixed(shape, gen).requires_grad_()
    w = fixed(param_shape, gen).requires_grad_() if affine else None
    b = fixed(param_shape, gen).requires_grad_() if affine and bias else None
    gy = fixed(shape, gen)
    y = f(x, w, b)
    (y * gy).sum().backward()
    out.append(header)
    out.append(line("x", x.detach()))
    for name, t in (("w", w), ("b", b)):
        if t is not None:
            out.append(line(name, t.detach()))
    out.append(line("gy", gy))
    out.append(line("y", y.detach()))
    for name, t in (("gx", x), ("gw", w), ("gb", b)):
        if t is not None:
            out.append(line(name, t.grad))


def layer_norm(out, seed, name, shape, normalized_shape, eps, affine=True, bias=True):
    header = "case %s normalized_shape %s eps %r" % (name, " ".join(str(d) for d in normalized_shape), eps)
    op_case(out, seed, header, shape, normalized_shape, affine, bias,
            lambda x, w, b: F.layer_norm(x, normalized_shape, w, b, eps))


def group_norm(out, seed, name, shape, groups, eps, affine=True):
    header = "case %s groups %d eps %r" % (name, groups, eps)
    op_case(out, seed, header, shape, (shape[1],), affine, affine, lambda x, w, b: F.group_norm(x, groups, w, b, eps))


def batch_norm1d_train(out, seed, name, shape, momentum, eps):
    """One training step of a BatchNorm1d: its output, gradients and running statistics after it."""
    gen = torch.Generator().manual_seed(seed)
    bn = torch.nn.BatchNorm1d(shape[1], eps=eps, momentum=momentum).double()
    with torch.no_grad():
        bn.weight.copy_(fixed((shape[1],), gen))
        bn.bias.copy_(fixed((shape[1],), gen))
    x = fixed(shape, gen).requires_grad_()
    gy = fixed(shape, gen)
    y = bn(x)
    (y * gy).sum().backward()
    out.append("case %s momentum %r eps %r" % (name, momentum, eps))
    for tname, t in (("x", x), ("w", bn.weight), ("b", bn.bias), ("gy", gy), ("y", y), ("gx", x.grad),
                     ("gw", bn.weight.grad), ("gb", bn.bias.grad), ("running_mean", bn.running_mean),
                     ("running_var", bn.running_var)):
        out.append(line(tname, t.detach()))


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def module_case(out, seed, name, module, shape, params):
    """Gives module fixed parameters (and buffers), saves its state_dict, records x and y."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, t in sorted(module.state_dict().items()):
            if t.is_floating_point():
                t.copy_(fixed(t.shape, gen))
        for key, t in params.items():
            module.state_dict()[key].copy_(t)
    module.eval()
    x = fixed(shape, gen).float()
    with torch.no_grad():
        y = module(x)
    save_safetensors(os.path.join(HERE, name + "_state_dict.safetensors"), module.state_dict())
    out.append("case %s" % name)
    out.append(line("x", x))
    out.append(line("y", y))


def main():
    out = []
    layer_norm(out, 1, "layer_norm_2d", (4, 6), (6,), 1e-5)
    layer_norm(out, 2, "layer_norm_4d_two_dims", (2, 3, 4, 5), (4, 5), 1e-5)
    layer_norm(out, 3, "layer_norm_no_affine", (3, 8), (8,), 1e-3, affine=False)
    layer_norm(out, 4, "layer_norm_no_bias", (5, 7), (7,), 1e-5, bias=False)
    module_case(out, 6, "layer_norm_module", torch.nn.LayerNorm((4, 5)), (3, 4, 5), {})
    group_norm(out, 7, "group_norm_4d", (2, 6, 3, 2), 3, 1e-5)
    group_norm(out, 8, "group_norm_3d", (3, 4, 5), 2, 1e-5)
    group_norm(out, 9, "group_norm_2d", (4, 6), 2, 1e-5)
    group_norm(out, 10, "group_norm_one_channel_per_group_no_affine", (2, 4, 3, 3), 4, 1e-3, affine=False)
    module_case(out, 11, "group_norm_module", torch.nn.GroupNorm(2, 6), (2, 6, 3, 3), {})
    batch_norm1d_train(out, 12, "batch_norm1d_2d", (6, 4), 0.1, 1e-5)
    batch_norm1d_train(out, 13, "batch_norm1d_3d", (3, 4, 5), 0.3, 1e-3)
    gen = torch.Generator().manual_seed(14)
    running_var = torch.round((torch.rand((5,), generator=gen, dtype=torch.float64) + 0.5) * 64) / 64
    buffers = {"running_var": running_var.float(), "num_batches_tracked": torch.tensor(7)}
    module_case(out, 15, "batch_norm1d_module", torch.nn.BatchNorm1d(5), (4, 5, 3), buffers)
    with open(os.path.join(HERE, "normalization_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
