#!/usr/bin/env python3
"""PyTorch's side of bench_ops: the same ops at the same sizes, timed the same way (forward alone,
and forward plus backward through sum(y * gy); the median over --reps timings of --calls calls
between two synchronisations), printing the same key=value records:
    op=exp shape=8x1024x3072 dtype=bfloat16 fwd_ms=... fwd_bwd_ms=...
--mode eager (default): each op is one call, as in bench_ops. --mode compile: each case's forward,
and its forward plus the loss whose backward is timed, through torch.compile (inductor's generated
kernels); --mode reduce-overhead: the same with CUDA graphs. A case that does not compile prints
`unavailable=...` and the rest go on.

usage: torch_ops_peer.py [--device cuda] [--dtype bfloat16] [--reps 10] [--calls 10] [--scale 1]
                         [--mode eager|compile|reduce-overhead] [--filter SUBSTRING]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def cases(dtype, dev, scale):
    gen = torch.Generator(device="cpu").manual_seed(1)

    def var(shape, lo=-1.0, hi=1.0):
        t = (torch.rand(shape, generator=gen) * (hi - lo) + lo).to(device=dev, dtype=dtype)
        return t.requires_grad_(True)

    def ids(shape, high):
        return torch.randint(0, high, shape, generator=gen).to(dev)

    B, T, C, H = 8 // scale, 1024 // scale, 768 // scale, 12
    Fh, V = 4 * C, 50257 // scale
    D = C // H
    btf = f"{B}x{T}x{Fh}"
    rows = f"{B * T}"
    h, pos, other = var((B, T, Fh)), var((B, T, Fh), 0.1, 2.0), var((B, T, Fh), 0.5, 2.0)
    row = var((Fh,), 0.5, 2.0)
    cond = torch.randint(0, 2, (B, T, Fh), generator=gen).to(dev).bool()
    out = [
        ("exp", btf, lambda: torch.exp(h)),
        ("log", btf, lambda: torch.log(pos)),
        ("sqrt", btf, lambda: torch.sqrt(pos)),
        ("rsqrt", btf, lambda: torch.rsqrt(pos)),
        ("pow_scalar", btf, lambda: torch.pow(h, 2.0)),
        ("clamp", btf, lambda: torch.clamp(h, -0.5, 0.5)),
        ("abs", btf, lambda: torch.abs(h)),
        ("div", btf, lambda: h / other),
        ("div_row", btf, lambda: h / row),
        ("pow_tensor", btf, lambda: torch.pow(pos, other)),
        ("where", btf, lambda: torch.where(cond, h, other)),
    ]
    scores = var((B, H, T, T))
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1).view(1, 1, T, T)
    q, k = var((B, H, T, D)), var((B, H, T, D))
    qb, kb = var((B * H, T, D)), var((B * H, D, T))
    bhtt, bhtd = f"{B}x{H}x{T}x{T}", f"{B}x{H}x{T}x{D}"
    out += [
        ("masked_fill", bhtt, lambda: scores.masked_fill(causal, -1e4)),
        ("matmul_qkT", bhtd, lambda: torch.matmul(q, k.transpose(-2, -1))),
        ("matmul_pv", bhtt, lambda: torch.matmul(scores, k)),
        ("bmm", f"{B * H}x{T}x{D}", lambda: torch.bmm(qb, kb)),
    ]
    x2 = var((B * T, Fh))
    x2s = f"{rows}x{Fh}"
    out += [
        ("sum_last", x2s, lambda: x2.sum(-1, keepdim=True)),
        ("mean_first", x2s, lambda: x2.mean(0)),
        ("max_last", x2s, lambda: x2.max(-1).values),
    ]
    classes = 1000
    logits, labels = var((B * T, classes)), ids((B * T,), classes)
    lg = f"{rows}x{classes}"
    targets = torch.rand((B * T, C), generator=gen).to(device=dev, dtype=dtype)
    z, zt = var((B * T, C)), var((B * T, C))
    zs = f"{rows}x{C}"
    out += [
        ("nll_loss", lg, lambda: F.nll_loss(F.log_softmax(logits, -1), labels)),
        ("bce_with_logits", zs, lambda: F.binary_cross_entropy_with_logits(z, targets)),
        ("l1_loss", zs, lambda: F.l1_loss(z, zt)),
        ("smooth_l1_loss", zs, lambda: F.smooth_l1_loss(z, zt)),
    ]
    a, b, c = var((B, T, C)), var((B, T, C)), var((B, T, C))
    btc = f"{B}x{T}x{C}"
    heads = var((B, T, H, D))
    img = var((32 // scale, 64, 56, 56))
    table, tokens = var((V, C)), ids((B, T), V)
    picks = ids((B * T, 1), classes)
    vc = f"{V}x{C}"
    out += [
        ("cat_last", btc, lambda: torch.cat([a, b, c], -1)),
        ("stack", btc, lambda: torch.stack([a, b, c], 0)),
        ("permute_contiguous", btc, lambda: heads.permute(0, 2, 1, 3).contiguous()),
        ("pad", f"{32 // scale}x64x56x56", lambda: F.pad(img, (1, 1, 1, 1))),
        ("embedding", vc, lambda: F.embedding(tokens, table)),
        ("index_select", vc, lambda: torch.index_select(table, 0, tokens.flatten())),
        ("gather", lg, lambda: torch.gather(logits, 1, picks)),
    ]
    ln_w, ln_b = var((C,)), var((C,))
    feat, gn_w, gn_b = var((32 // scale, 256, 28, 28)), var((256,)), var((256,))
    out += [
        ("layer_norm", zs, lambda: F.layer_norm(z, (C,), ln_w, ln_b)),
        ("group_norm", f"{32 // scale}x256x28x28", lambda: F.group_norm(feat, 32, gn_w, gn_b)),
    ]
    aq, ak, av = var((B, H, T, D)), var((B, H, T, D)), var((B, H, T, D))
    out += [
        ("sdpa_causal", bhtd, lambda: F.scaled_dot_product_attention(aq, ak, av, is_causal=True)),
    ]
    return out


def median_ms(dev, reps, calls, fn):
    for _ in range(3):
        fn()
    sync(dev)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(dev)
        times.append((time.perf_counter() - start) * 1000.0 / calls)
    times.sort()
    return times[len(times) // 2]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--filter", default="")
    parser.add_argument("--mode", default="eager", choices=["eager", "compile", "reduce-overhead"])
    args = parser.parse_args()
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    for name, shape, fn in cases(dtype, dev, args.scale):
        if args.filter and args.filter not in name:
            continue
        try:
            fwd_ms, fwd_bwd_ms = time_case(dev, dtype, args, fn)
        except Exception as e:  # a case inductor cannot compile is reported, not fatal
            print(f"op={name} shape={shape} dtype={args.dtype} mode={args.mode} unavailable={str(e)[:200]!r}",
                  flush=True)
            continue
        print(f"op={name} shape={shape} dtype={args.dtype} mode={args.mode} fwd_ms={fwd_ms:.4f} "
              f"fwd_bwd_ms={fwd_bwd_ms:.4f}", flush=True)


def time_case(dev, dtype, args, fn):
    gy = torch.rand(fn().shape, generator=torch.Generator().manual_seed(2)).to(device=dev, dtype=dtype) * 2 - 1

    def loss():
        return (fn() * gy).sum()

    forward = fn
    if args.mode != "eager":
        torch._dynamo.reset()
        mode = None if args.mode == "compile" else "reduce-overhead"
        forward = torch.compile(fn, mode=mode)
        loss = torch.compile(loss, mode=mode)

    def step():
        loss().backward()

    with torch.no_grad():
        fwd = median_ms(dev, args.reps, args.calls, forward)
    return fwd, median_ms(dev, args.reps, args.calls, step)


if __name__ == "__main__":
    main()
