#!/usr/bin/env python3
"""GPT-2 trained on token shards in PyTorch, with the recipe of dpl's train_gpt2.

The counterpart that dpl's validation loss is compared with (scripts/gpu_gpt2_text.sh): the same
model (GPT-2 as nanoGPT writes it: learned position embedding, pre-LayerNorm blocks, GELU (tanh),
a head tied to the token embedding, no dropout, nanoGPT's initialisation), the same data (llm.c's
.bin token shards, windows of T + 1 tokens starting every T tokens, as data::TokenLoader reads
them), the same optimizer (AdamW, betas 0.9 and 0.95, eps 1e-8, weight decay on the matrices
and embeddings only, clipping to a global norm), the same schedule (llm.c's linear warmup, then
a cosine down to lr/10 at the last step), the same validation (the mean loss over the first
val_steps x b windows of the validation shards, in order) and the same gradient accumulation.
16-bit runs use autocast (float32 weights, matrix products in the 16-bit dtype) and attention is
F.scaled_dot_product_attention (flash attention on a GPU).

What differs from train_gpt2, by necessity: the random draws (initial weights and the order of
the training windows come from PyTorch's and numpy's generators, not dpl's), and autocast keeps
float32 weights where dpl's mixed precision computes with bfloat16 copies of float32 masters.

Prints a line per report (`step=... loss=... [val_loss=...] lr=... tokens_per_s=...`) and last
one record: `what=gpt2_text params=... steps=... val_loss=... tokens_per_s=... seconds=...`.
One process; the flags are train_gpt2's.
"""
import argparse
import glob
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SHARD_MAGIC = 20240520
SHARD_VERSION = 1  # uint16 tokens
HEADER_BYTES = 1024


def open_shard(path):
    """The tokens of an llm.c token shard (docs/token-data.md), mapped, after checking its header."""
    header = np.fromfile(path, dtype="<i4", count=3)
    if len(header) < 3:
        sys.exit(f"{path}: shorter than the {HEADER_BYTES}-byte header")
    magic, version, count = (int(v) for v in header)
    if magic != SHARD_MAGIC or version != SHARD_VERSION:
        sys.exit(f"{path}: expected magic {SHARD_MAGIC} and version {SHARD_VERSION}, got {magic} and {version}")
    size = os.path.getsize(path)
    if size != HEADER_BYTES + 2 * count:
        sys.exit(f"{path}: the header says {count} tokens, so {HEADER_BYTES + 2 * count} bytes, but it holds {size}")
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(count,))


def expand(patterns, flag):
    paths = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if not found:
            sys.exit(f"{flag} '{pattern}' matches no file")
        paths += found
    return paths


class Windows:
    """Every window of T + 1 tokens that starts at a multiple of T inside one shard, numbered shard
    by shard in the order of the paths, as dpl's TokenLoader numbers them."""

    def __init__(self, paths, seq_len):
        self.shards = [open_shard(p) for p in paths]
        self.seq_len = seq_len
        self.where = [(s, w * seq_len) for s, shard in enumerate(self.shards)
                      for w in range((len(shard) - 1) // seq_len)]
        if not self.where:
            sys.exit(f"no shard holds {seq_len + 1} tokens")

    def __len__(self):
        return len(self.where)

    def batch(self, numbers, device):
        rows = np.stack([self.shards[s][o:o + self.seq_len + 1] for s, o in (self.where[n] for n in numbers)])
        rows = torch.from_numpy(rows.astype(np.int64))
        if device.type == "cuda":
            rows = rows.pin_memory().to(device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]


class ShuffledStream:
    """Epoch after epoch of every window once, in a fresh random order each epoch."""

    def __init__(self, count, seed):
        self.count, self.seed, self.epoch, self.position = count, seed, 0, 0
        self.order = np.random.default_rng([seed, 0]).permutation(count)

    def take(self, n):
        out = []
        while len(out) < n:
            if self.position == self.count:
                self.epoch += 1
                self.position = 0
                self.order = np.random.default_rng([self.seed, self.epoch]).permutation(self.count)
            k = min(n - len(out), self.count - self.position)
            out += self.order[self.position:self.position + k].tolist()
            self.position += k
        return out


class SelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, block, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        # nanoGPT's initialisation: N(0, 0.02), the projections into the residual stream scaled
        # down by sqrt(2 layers), biases zero, LayerNorms as PyTorch makes them.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.size(1), device=ids.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the head is the embedding's matrix


def lr_at(step, lr, warmup, steps):
    """train_gpt2's schedule: lr (step + 1) / warmup, then a cosine from lr to lr / 10."""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, steps - warmup)
    progress = min(step - warmup, span) / span
    return lr / 10 + (lr - lr / 10) * (1 + math.cos(math.pi * progress)) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-i", "--train", nargs="+", required=True)
    parser.add_argument("-j", "--val", nargs="+", required=True)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--embd", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("-b", "--batchsize", type=int, default=8)
    parser.add_argument("-t", "--seq-len", type=int, default=1024)
    parser.add_argument("--total-batch-tokens", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--val-every", type=int, default=100)
    parser.add_argument("--val-steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = parser.parse_args()
    warmup = min(100, a.steps // 10) if a.warmup is None else a.warmup
    if a.seq_len > a.block_size:
        sys.exit(f"-t {a.seq_len} is longer than the block size {a.block_size}")
    per_micro_batch = a.batchsize * a.seq_len
    total = a.total_batch_tokens or per_micro_batch
    if total % per_micro_batch:
        sys.exit(f"--total-batch-tokens {total} is not a multiple of -b x -t = {per_micro_batch}")
    micro_batches = total // per_micro_batch

    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    train = Windows(expand(a.train, "-i"), a.seq_len)
    val = Windows(expand(a.val, "-j"), a.seq_len)
    val_steps = max(1, min(a.val_steps, len(val) // a.batchsize))
    stream = ShuffledStream(len(train), a.seed)

    model = GPT2(a.vocab, a.block_size, a.layers, a.heads, a.embd).to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **fused)
    step_model = torch.compile(model) if a.compile else model
    dtype = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    scaler = None
    if a.dtype == "float16":
        scaler = torch.amp.GradScaler(device.type) if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def autocast():
        return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)

    def loss_of(model_, ids, labels):
        with autocast():
            logits = model_(ids)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1))

    def validation_loss():
        model.eval()
        with torch.no_grad():
            total_loss = sum(loss_of(step_model, *val.batch(range(s * a.batchsize, (s + 1) * a.batchsize), device)).item()
                             for s in range(val_steps))
        model.train()
        return total_loss / val_steps

    print(f"gpt2_text_recipe: {a.layers} layers, {a.heads} heads, width {a.embd}, vocabulary {a.vocab}, "
          f"{params} parameters; {total} tokens per step = {micro_batches} x {a.batchsize} x {a.seq_len}; "
          f"{len(train)} training windows, {val_steps * a.batchsize} validation windows; {a.dtype} on {device}",
          flush=True)
    train_seconds, row_loss, row_seconds, row_steps, val_loss = 0.0, 0.0, 0.0, 0, float("nan")
    for step in range(a.steps):
        lr = lr_at(step, a.lr, warmup, a.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        ids, labels = train.batch(stream.take(a.batchsize * micro_batches), device)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for i in range(micro_batches):
            rows = slice(i * a.batchsize, (i + 1) * a.batchsize)
            loss = loss_of(step_model, ids[rows], labels[rows]) / micro_batches
            (scaler.scale(loss) if scaler else loss).backward()
            step_loss += loss.detach()
        if scaler:
            scaler.unscale_(optimizer)
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        row_loss += float(step_loss)  # waits for the step, so the clock reads its time
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        row_seconds += seconds
        row_steps += 1
        done = step + 1
        last = done == a.steps
        validate = last or (a.val_every > 0 and done % a.val_every == 0)
        if validate or done % a.log_every == 0:
            line = f"step={done} loss={row_loss / row_steps:.4f}"
            if validate:
                val_loss = validation_loss()
                line += f" val_loss={val_loss:.4f}"
            print(f"{line} lr={lr:.3g} tokens_per_s={row_steps * total / row_seconds:.0f}", flush=True)
            row_loss, row_seconds, row_steps = 0.0, 0.0, 0
    print(f"what=gpt2_text params={params} steps={a.steps} val_loss={val_loss:.4f} "
          f"tokens_per_s={a.steps * total / train_seconds:.0f} seconds={train_seconds:.1f}", flush=True)


if __name__ == "__main__":
    main()
