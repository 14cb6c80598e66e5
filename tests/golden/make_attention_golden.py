#!/usr/bin/env python3
"""Writes attention_golden.txt: small fixed scaled-dot-product-attention problems and PyTorch's
answers.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64. Each case holds q, k, v, an output gradient gy, and y, gq, gk, gv for the loss
sum(y * gy), and lse: per query row the log-sum-exp of the scaled scores over the keys the row sees
(the statistics the kernels keep for backward). The case line gives causal (0 or 1), scale (the
one used) and default_scale (1 when the op is called without a scale, which is then 1 / sqrt(D)).
Each case draws from its own seeded generator, so adding a case leaves the others' numbers as
they were.

y is F.scaled_dot_product_attention's (PyTorch 2.0 and later). An older PyTorch has no such
function (Debian's python3-torch is 1.13): there y is computed as that function's documentation
defines it, softmax(scale q k^T + mask) v with the causal mask -inf above the diagonal of the
(Tq, Tk) scores (top-left alignment). Where both exist they are compared to 1e-12. The gradients
come from autograd through whichever gave y; lse always from the scores.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_attention_golden.py
The C++ test (tests/unit/autograd/ops/attention_test.cpp) reads the file; it needs no Python.
Format: see tests/support/golden.hpp.
"""
import math
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def scores_of(q, k, causal, scale):
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        visible = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~visible, float("-inf"))
    return s


def attention(q, k, v, causal, scale, default_scale):
    reference = torch.softmax(scores_of(q, k, causal, scale), dim=-1) @ v
    if not hasattr(F, "scaled_dot_product_attention"):
        return reference
    try:
        kwargs = {} if default_scale else {"scale": scale}
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kwargs)
    except TypeError:  # PyTorch 2.0 takes no scale
        return reference
    assert torch.allclose(y, reference, rtol=0, atol=1e-12), "F.scaled_dot_product_attention and its definition differ"
    return y


def case(out, seed, name, b, h, tq, tk, d, dv, causal, scale=None):
    gen = torch.Generator().manual_seed(seed)
    q = fixed((b, h, tq, d), gen).requires_grad_()
    k = fixed((b, h, tk, d), gen).requires_grad_()
    v = fixed((b, h, tk, dv), gen).requires_grad_()
    gy = fixed((b, h, tq, dv), gen)
    default_scale = scale is None
    used = 1.0 / math.sqrt(d) if default_scale else scale
    y = attention(q, k, v, causal, used, default_scale)
    (y * gy).sum().backward()
    with torch.no_grad():
        lse = torch.logsumexp(scores_of(q, k, causal, used), dim=-1)
    out.append("case %s causal %d scale %r default_scale %d" % (name, int(causal), used, int(default_scale)))
    for tname, t in (("q", q), ("k", k), ("v", v), ("gy", gy), ("y", y), ("lse", lse), ("gq", q.grad),
                     ("gk", k.grad), ("gv", v.grad)):
        out.append(line(tname, t.detach()))


def main():
    out = []
    case(out, 1, "sdpa_square", 2, 2, 5, 5, 4, 4, False)
    case(out, 2, "sdpa_causal", 1, 3, 6, 6, 8, 8, True)
    case(out, 3, "sdpa_cross_wider_value", 2, 1, 3, 7, 4, 6, False, scale=0.3)
    case(out, 4, "sdpa_causal_more_queries_than_keys", 1, 2, 7, 4, 4, 4, True, scale=0.5)
    case(out, 5, "sdpa_causal_fewer_queries_than_keys", 1, 2, 3, 6, 5, 3, True)
    with open(os.path.join(HERE, "attention_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
