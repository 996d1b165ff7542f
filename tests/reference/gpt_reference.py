#!/usr/bin/env python3
"""PyTorch reference for weft's GPT-2: loads the checkpoint and token file weft trained
from, runs the same AdamW steps on the same llm.c batches, and compares its losses with
the ones weft logged (--log-json, one JSON object per step), and the global gradient
norms where weft logged them (clipping them as weft's --grad-clip when given). Exits 1 when
any step's loss or norm differs by more than --rtol (relative); prints both series either way.

Runs on Debian's python3-torch (PyTorch 1.13) and python3-numpy; needs nothing else."""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "U16": np.uint16}


def read_safetensors(path):
    """Name -> numpy array, by the safetensors layout: u64 header size, JSON header, data."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_size])
    data = blob[8 + header_size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).copy()
    return tensors


def read_tokens(path):
    """llm.c .bin: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if len(tokens) != header[2]:
        sys.exit(f"{path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def batch_at(tokens, step, B, T):
    """llm.c's DataLoader: batch k is the contiguous window at (k mod batches) * B * T."""
    per_epoch = (len(tokens) - 1) // (B * T)
    start = (step % per_epoch) * B * T
    window = torch.from_numpy(tokens[start:start + B * T + 1])
    return window[:-1].view(B, T), window[1:].view(B, T)


class GPT(torch.nn.Module):
    """GPT-2 with Hugging Face's tensor names and Conv1D layouts (weights stored [in, out])."""

    def __init__(self, weights, layers, heads, fused_attention=False):
        """fused_attention: use PyTorch 2's scaled_dot_product_attention (its fastest CPU
        path, for speed comparisons) instead of the explicit softmax the loss match uses."""
        super().__init__()
        self.layers, self.heads = layers, heads
        self.fused_attention = fused_attention
        self.params = torch.nn.ParameterDict(
            {name.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(w)) for name, w in weights.items()})

    def p(self, name):
        return self.params[name.replace(".", "__")]

    def forward(self, idx):
        B, T = idx.shape
        x = self.p("wte.weight")[idx] + self.p("wpe.weight")[:T]
        C = x.shape[-1]
        hd = C // self.heads
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for i in range(self.layers):
            h = f"h.{i}."
            a = F.layer_norm(x, (C,), self.p(h + "ln_1.weight"), self.p(h + "ln_1.bias"), 1e-5)
            qkv = a @ self.p(h + "attn.c_attn.weight") + self.p(h + "attn.c_attn.bias")
            q, k, v = qkv.split(C, dim=-1)
            q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
            if self.fused_attention:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
                att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
                y = att @ v
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + y @ self.p(h + "attn.c_proj.weight") + self.p(h + "attn.c_proj.bias")
            m = F.layer_norm(x, (C,), self.p(h + "ln_2.weight"), self.p(h + "ln_2.bias"), 1e-5)
            m = F.gelu(m @ self.p(h + "mlp.c_fc.weight") + self.p(h + "mlp.c_fc.bias"), approximate="tanh")
            x = x + m @ self.p(h + "mlp.c_proj.weight") + self.p(h + "mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), self.p("ln_f.weight"), self.p("ln_f.bias"), 1e-5)
        return x @ self.p("wte.weight").T  # LM head tied to the token embedding


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="safetensors weights weft started from")
    parser.add_argument("--data", required=True, help="llm.c .bin token file")
    parser.add_argument("--weft-log", required=True, help="weft's --log-json output")
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--weight-decay", type=float, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--grad-clip", type=float, default=0.0,
                        help="clip the global gradient norm to this, as weft's --grad-clip (0: off)")
    parser.add_argument("--val-data", help="llm.c .bin token file of weft's --val-data: compare its val losses")
    parser.add_argument("--val-batches", type=int, default=8)
    parser.add_argument("--require-clipping", action="store_true",
                        help="fail unless some step's norm was above --grad-clip (the test exercises clipping)")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT(read_safetensors(args.checkpoint), args.layers, args.heads)
    # Weight decay on 2-D tensors only, as weft does.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    tokens = read_tokens(args.data)
    with open(args.weft_log) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    # Step lines; validation lines ({"step", "val_loss"}) are not training steps.
    weft_steps = [s for s in lines if "loss" in s]
    # Validation lines: the steps taken when weft evaluated, and its loss then.
    weft_val = {s["step"]: s["val_loss"] for s in lines if "val_loss" in s}
    val_tokens = read_tokens(args.val_data) if args.val_data else None
    if val_tokens is not None and not weft_val:
        sys.exit(f"{args.weft_log}: no validation losses logged")
    weft_losses = [s["loss"] for s in weft_steps]
    if len(weft_losses) < args.steps:
        sys.exit(f"{args.weft_log}: {len(weft_losses)} steps logged, {args.steps} expected")

    worst = 0.0
    clipped_steps = 0
    for step in range(args.steps):
        inputs, targets = batch_at(tokens, step, args.batch, args.seq_len)
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        # The global norm over every parameter, the tied wte once; clipped when asked
        # (an infinite bound measures without clipping).
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              args.grad_clip if args.grad_clip > 0 else float("inf")).item()
        optimizer.step()
        clipped_steps += 1 if 0 < args.grad_clip < norm else 0
        relative = abs(loss.item() - weft_losses[step]) / abs(loss.item())
        worst = max(worst, relative)
        line = f"step {step:2d} | torch {loss.item():.6f} | weft {weft_losses[step]:.6f} | rel diff {relative:.2e}"
        if "grad_norm" in weft_steps[step]:
            norm_relative = abs(norm - weft_steps[step]["grad_norm"]) / norm
            worst = max(worst, norm_relative)
            line += f" | norm torch {norm:.6f} weft {weft_steps[step]['grad_norm']:.6f} rel diff {norm_relative:.2e}"
        print(line)
        if val_tokens is not None and step + 1 in weft_val:
            with torch.no_grad():
                val = sum(F.cross_entropy(model(x).flatten(0, 1), y.reshape(-1)).item()
                          for x, y in (batch_at(val_tokens, b, args.batch, args.seq_len)
                                       for b in range(args.val_batches))) / args.val_batches
            val_relative = abs(val - weft_val[step + 1]) / abs(val)
            worst = max(worst, val_relative)
            print(f"after {step + 1:2d} steps | val loss torch {val:.6f} weft {weft_val[step + 1]:.6f} "
                  f"rel diff {val_relative:.2e}")
    if args.require_clipping and clipped_steps == 0:
        print(f"FAIL: no step's norm was above --grad-clip {args.grad_clip}: clipping was not exercised")
        return 1
    verdict = "PASS" if worst <= args.rtol else "FAIL"
    print(f"{verdict}: largest relative loss or norm difference {worst:.2e} (tolerance {args.rtol:.0e})")
    return 0 if worst <= args.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
