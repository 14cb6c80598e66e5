#!/usr/bin/env python3
"""Writes shape_golden.txt and embedding_state_dict.safetensors: small fixed problems of the shape
and indexing ops, batched matmul and nn.Embedding, and PyTorch's answers.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64. Each case holds the inputs, the output y, the weighting gy of the loss sum(y * gy) and
the gradients of that loss. Index tensors are written as numbers like the rest (the test turns
them into int64). The embedding case's weight comes from a torch.nn.Embedding (N(0, 1) draws
rounded to multiples of 1/64, padding row zero) whose state_dict is also written as a
safetensors file, the format a PyTorch user saves with safetensors.torch.save_file; the writer
below is the format's few lines, so that the script needs no safetensors package.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_shape_golden.py
The C++ test (tests/unit/autograd/ops/shape_golden_test.cpp) reads the files; it needs no Python.
Format: see tests/support/golden.hpp.
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


def params_text(params):
    return " ".join("%s %s" % (k, " ".join(repr(v) for v in (vs if isinstance(vs, (list, tuple)) else [vs])))
                    for k, vs in params.items())


def case(out, gen, name, inputs, fn, params=None, indices=None):
    """One case: inputs (name -> shape) drawn as leaves, y = fn(*leaves), gradients of sum(y * gy)."""
    out.append(("case %s %s" % (name, params_text(params or {}))).rstrip())
    leaves = {k: fixed(s, gen).requires_grad_() for k, s in inputs.items()}
    for k, t in leaves.items():
        out.append(line(k, t.detach()))
    for k, t in (indices or {}).items():
        out.append(line(k, t))
    y = fn(*leaves.values())
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append(line("y", y.detach()))
    out.append(line("gy", gy))
    for k, t in leaves.items():
        out.append(line("g" + k, t.grad))


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    gen = torch.Generator().manual_seed(20261203)
    out = []
    case(out, gen, "pad", {"x": (2, 3, 4)}, lambda x: F.pad(x, (1, 2, 0, 1), value=0.5),
         {"pads": [1, 2, 0, 1], "value": 0.5})
    case(out, gen, "pad_crop", {"x": (2, 3, 4)}, lambda x: F.pad(x, (-1, 2, 1, -1), value=-1.0),
         {"pads": [-1, 2, 1, -1], "value": -1.0})
    case(out, gen, "cat", {"a": (2, 3), "b": (2, 1), "c": (2, 2)}, lambda a, b, c: torch.cat([a, b, c], 1),
         {"dim": 1})
    case(out, gen, "stack", {"a": (2, 3), "b": (2, 3)}, lambda a, b: torch.stack([a, b], 1), {"dim": 1})
    # The pieces joined in reverse order: each piece's gradient must come back to its own rows.
    case(out, gen, "chunk", {"x": (5, 4)}, lambda x: torch.cat(list(reversed(x.chunk(3, 0)))), {"chunks": 3})
    case(out, gen, "permute_reshape", {"x": (2, 3, 4)}, lambda x: x.permute(2, 0, 1).reshape(4, 6),
         {"dims": [2, 0, 1]})
    case(out, gen, "transpose_matmul", {"a": (4, 3), "b": (4, 5)}, lambda a, b: torch.matmul(a.transpose(0, 1), b))
    case(out, gen, "expand", {"x": (3, 1)}, lambda x: x.expand(2, 3, 4), {"shape": [2, 3, 4]})
    gather_index = torch.randint(0, 4, (3, 2, 5), generator=gen)
    case(out, gen, "gather", {"x": (3, 4, 5)}, lambda x: torch.gather(x, 1, gather_index), {"dim": 1},
         {"index": gather_index})
    select_index = torch.tensor([2, 0, 2, 3])
    case(out, gen, "index_select", {"x": (4, 3, 2)}, lambda x: torch.index_select(x, 0, select_index), {"dim": 0},
         {"index": select_index})
    case(out, gen, "matmul_broadcast", {"a": (2, 1, 3, 4), "b": (3, 4, 5)}, torch.matmul)
    case(out, gen, "matmul_vector_batch", {"a": (4,), "b": (2, 4, 3)}, torch.matmul)
    case(out, gen, "matmul_batch_vector", {"a": (2, 3, 4), "b": (4,)}, torch.matmul)
    case(out, gen, "matmul_batch_matrix", {"a": (2, 3, 4), "b": (4, 2)}, torch.matmul)
    case(out, gen, "bmm", {"a": (2, 3, 4), "b": (2, 4, 2)}, torch.bmm)

    # nn.Embedding(10, 4, padding_idx=1): PyTorch's initialisation, rounded to multiples of 1/64.
    torch.manual_seed(7)
    emb = torch.nn.Embedding(10, 4, padding_idx=1).double()
    with torch.no_grad():
        emb.weight.copy_(torch.round(emb.weight * 64) / 64)
    ids = torch.tensor([[3, 1, 7], [3, 9, 0]])
    out.append("case embedding padding_idx 1")
    out.append(line("ids", ids))
    out.append(line("weight", emb.weight.detach()))
    y = emb(ids)
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append(line("y", y.detach()))
    out.append(line("gy", gy))
    out.append(line("gweight", emb.weight.grad))
    write_safetensors(os.path.join(HERE, "embedding_state_dict.safetensors"), emb.state_dict())

    with open(os.path.join(HERE, "shape_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
