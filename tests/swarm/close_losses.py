#!/usr/bin/env python3
"""Checks a swarm_train step log against a train_gpt one on the same global batches.

    close_losses.py REFERENCE.jsonl SWARM.jsonl --batch B [--rtol 1e-5] [--compressed]

Every step of the reference must be in the SWARM log with a loss within --rtol (relative),
and every SWARM step must have counted exactly --batch samples (each sample once). With
--compressed, the SWARM log must also show fewer wire bytes per micro-batch than plain.
Standard library only (CI runs it with Debian's python3).
"""
import argparse
import json
import sys


def steps(path):
    out = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record and "event" not in record:
                out[record["step"]] = record
    if not out:
        sys.exit(f"{path} holds no steps")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("reference")
    parser.add_argument("swarm")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--compressed", action="store_true")
    args = parser.parse_args()
    reference, swarm = steps(args.reference), steps(args.swarm)
    failures = []
    for step, ref in sorted(reference.items()):
        if step not in swarm:
            failures.append(f"step {step}: not in {args.swarm}")
            continue
        got = swarm[step]
        rel = abs(got["loss"] - ref["loss"]) / abs(ref["loss"])
        print(f"step {step}: reference {ref['loss']:.9g} swarm {got['loss']:.9g} relative {rel:.2e} "
              f"samples {got['samples']} retries {got['retried_calls']}")
        if rel > args.rtol:
            failures.append(f"step {step}: relative difference {rel:.3e} > {args.rtol}")
        if got["samples"] != args.batch:
            failures.append(f"step {step}: {got['samples']} samples counted, the batch has {args.batch}")
        if args.compressed and not got["wire_bytes_per_microbatch"] < got["plain_bytes_per_microbatch"]:
            failures.append(f"step {step}: compression saved nothing ({got['wire_bytes_per_microbatch']} bytes)")
    if failures:
        sys.exit("\n".join(failures))
    print(f"{len(reference)} steps agree within {args.rtol}")


if __name__ == "__main__":
    main()
