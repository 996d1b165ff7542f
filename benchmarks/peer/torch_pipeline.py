#!/usr/bin/env python3
"""PyTorch's own pipeline parallelism (torch.distributed.pipelining over gloo, one process per
pipeline rank on this machine) training the GPT-2 that weft's train_gpt trains: the peer that
benchmarks/peer/compare.sh times weft against. Prints one JSON line on rank 0:
{"schedule": ..., "pp": ..., "median_ms": ..., "threads": ..., "torch": ...}.

Needs PyTorch 2.x from PyPI (pip install torch in a venv), not Debian's 1.13: pipelining is
2.4 and later. Not part of CI.

The model: the tests' reference GPT (tests/reference/gpt_reference.py: Hugging Face's names,
weights stored [in, out], GELU tanh, layer norm eps 1e-5), cut into pp * chunks stages of
equal layer counts, the embedding on the first stage and the head on the last. The head keeps
its own copy of the token embedding (pipelining has no weights tied across stages; weft sums
the tied copies' gradients, a reduction of vocab x d_model floats per step)."""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

SCHEDULES = {
    # name: (PyTorch class name, chunks per rank, stage placement); each name is also weft's
    # schedule of the same order (interleaved-zb: weft's interleaved-zb, PyTorch's order action
    # for action, tests/sched/reference)
    "gpipe": ("ScheduleGPipe", 1, "loop"),
    "1f1b": ("Schedule1F1B", 1, "loop"),
    "interleaved": ("ScheduleInterleaved1F1B", 2, "loop"),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", 2, "loop"),
    "zbv": ("ScheduleZBVZeroBubble", 2, "v"),
}


class Stage(torch.nn.Module):
    """Layers [first, last) of the GPT, with the embedding when first == 0 and the final layer
    norm and head when last == layers."""

    def __init__(self, args, first, last, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        C, V, T = args.d_model, args.vocab, args.seq_len
        self.args, self.first, self.last = args, first, last

        def normal(*shape, std=0.02):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * std)

        def ones(n):
            return torch.nn.Parameter(torch.ones(n))

        def zeros(n):
            return torch.nn.Parameter(torch.zeros(n))

        if first == 0:
            self.wte, self.wpe = normal(V, C), normal(T, C)
        proj = 0.02 / math.sqrt(2 * args.layers)
        self.blocks = torch.nn.ModuleList()
        for _ in range(first, last):
            b = torch.nn.ParameterDict({
                "ln_1_w": ones(C), "ln_1_b": zeros(C), "attn_w": normal(C, 3 * C), "attn_b": zeros(3 * C),
                "proj_w": normal(C, C, std=proj), "proj_b": zeros(C), "ln_2_w": ones(C), "ln_2_b": zeros(C),
                "fc_w": normal(C, 4 * C), "fc_b": zeros(4 * C), "fc_proj_w": normal(4 * C, C, std=proj),
                "fc_proj_b": zeros(C)})
            self.blocks.append(b)
        if last == args.layers:
            self.ln_f_w, self.ln_f_b, self.head = ones(C), zeros(C), normal(V, C)

    def forward(self, x):
        a = self.args
        if self.first == 0:
            x = self.wte[x] + self.wpe[: x.shape[1]]
        B, T, C = x.shape
        hd = C // a.heads
        for b in self.blocks:
            h = F.layer_norm(x, (C,), b["ln_1_w"], b["ln_1_b"], 1e-5)
            q, k, v = (h @ b["attn_w"] + b["attn_b"]).split(C, dim=-1)
            q, k, v = (t.view(B, T, a.heads, hd).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + y @ b["proj_w"] + b["proj_b"]
            m = F.layer_norm(x, (C,), b["ln_2_w"], b["ln_2_b"], 1e-5)
            x = x + F.gelu(m @ b["fc_w"] + b["fc_b"], approximate="tanh") @ b["fc_proj_w"] + b["fc_proj_b"]
        if self.last == a.layers:
            x = F.layer_norm(x, (C,), self.ln_f_w, self.ln_f_b, 1e-5) @ self.head.T
        return x


def stage_indices(rank, pp, chunks, placement):
    """The stages a rank holds: looped (rank, rank + pp, ...) or V-shaped (rank, 2pp - 1 - rank)."""
    if placement == "v":
        return [rank, 2 * pp - 1 - rank]
    return [rank + k * pp for k in range(chunks)]


def run(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.pp)
    from torch.distributed import pipelining
    from torch.distributed.pipelining import schedules

    class_name, chunks, placement = SCHEDULES[args.schedule]
    stages_total = args.pp * chunks
    per_stage = args.layers // stages_total
    modules, stages = [], []
    for s in stage_indices(rank, args.pp, chunks, placement):
        module = Stage(args, s * per_stage, (s + 1) * per_stage, seed=1234 + s)
        modules.append(module)
        stages.append(pipelining.PipelineStage(module, s, stages_total, torch.device("cpu")))
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, args.vocab), target.reshape(-1))

    cls = getattr(schedules, class_name)
    schedule = cls(stages[0] if chunks == 1 else stages, args.microbatches, loss_fn=loss_fn)
    holds_first = any(s.stage_index == 0 for s in stages)
    holds_last = any(s.stage_index == stages_total - 1 for s in stages)
    g = torch.Generator().manual_seed(1)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=g)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        kwargs = {"target": y} if holds_last else {}
        if holds_first:
            schedule.step(x, **kwargs)
        else:
            schedule.step(**kwargs)
        optimizer.step()
        dist.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    if rank == 0:
        print(json.dumps({"schedule": args.schedule, "torch_class": class_name, "pp": args.pp,
                          "median_ms": round(1e3 * statistics.median(times), 2), "threads": args.threads,
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), required=True)
    parser.add_argument("--pp", type=int, required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--port", type=int, default=29517)
    args = parser.parse_args()
    chunks = SCHEDULES[args.schedule][1]
    if args.pp < 2 or args.layers % (args.pp * chunks) != 0:
        sys.exit(f"torch_pipeline: --pp must be >= 2 and divide --layers {args.layers} into "
                 f"{args.pp * chunks} stages of equal layer counts")
    if args.batch % args.microbatches != 0 or args.d_model % args.heads != 0:
        sys.exit("torch_pipeline: --microbatches must divide --batch and --heads must divide --d-model")
    os.environ["MASTER_PORT"] = str(args.port)
    mp.spawn(run, args=(args,), nprocs=args.pp, join=True)


if __name__ == "__main__":
    main()
