#!/usr/bin/env python3
"""Times one PyTorch CPU training step of the GPT-2 in gpt_reference.py (same tensor names,
layouts and math as weft's): forward, mean cross-entropy, backward, AdamW step. bench_step
runs it in the same run as weft's step, with the same config and thread count, and reads
the last line, a JSON object with the median step time in milliseconds.

Runs on Debian's python3-torch (PyTorch 1.13) and python3-numpy, or on PyTorch 2.x from PyPI
(then with scaled_dot_product_attention); needs nothing else."""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import GPT  # noqa: E402  (the model the loss-match test checks weft against)


def gpt2_weights(layers, d_model, vocab, seq_len, seed):
    """Hugging Face names and [in, out] layouts, initialised as GPT-2 (values do not matter for speed)."""
    rng = np.random.default_rng(seed)
    C = d_model

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {"wte.weight": normal(vocab, C), "wpe.weight": normal(seq_len, C)}
    proj_std = 0.02 / math.sqrt(2 * layers)
    for i in range(layers):
        h = f"h.{i}."
        w[h + "ln_1.weight"] = np.ones(C, np.float32)
        w[h + "ln_1.bias"] = np.zeros(C, np.float32)
        w[h + "attn.c_attn.weight"] = normal(C, 3 * C)
        w[h + "attn.c_attn.bias"] = np.zeros(3 * C, np.float32)
        w[h + "attn.c_proj.weight"] = normal(C, C, std=proj_std)
        w[h + "attn.c_proj.bias"] = np.zeros(C, np.float32)
        w[h + "ln_2.weight"] = np.ones(C, np.float32)
        w[h + "ln_2.bias"] = np.zeros(C, np.float32)
        w[h + "mlp.c_fc.weight"] = normal(C, 4 * C)
        w[h + "mlp.c_fc.bias"] = np.zeros(4 * C, np.float32)
        w[h + "mlp.c_proj.weight"] = normal(4 * C, C, std=proj_std)
        w[h + "mlp.c_proj.bias"] = np.zeros(C, np.float32)
    w["ln_f.weight"] = np.ones(C, np.float32)
    w["ln_f.bias"] = np.zeros(C, np.float32)
    return w


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--d-model", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="timed steps; the median is reported")
    args = parser.parse_args()
    if min(args.layers, args.d_model, args.heads, args.vocab, args.seq_len, args.batch, args.threads,
           args.steps) < 1 or args.warmup < 0 or args.d_model % args.heads != 0:
        sys.exit("gpt_step_torch: sizes must be positive, --warmup >= 0 and --heads must divide --d-model")

    torch.set_num_threads(args.threads)
    # PyTorch 2 gets its fused attention, as a user of it would write the model.
    fused = hasattr(F, "scaled_dot_product_attention")
    model = GPT(gpt2_weights(args.layers, args.d_model, args.vocab, args.seq_len, 1234), args.layers, args.heads,
                fused_attention=fused)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.999), eps=1e-8)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=generator)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed * 1e3)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": args.steps,
                      "median_ms": statistics.median(times), "min_ms": min(times), "loss": loss.item(),
                      "fused_attention": fused}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
