#!/usr/bin/env python3
"""PyTorch reference for weft's sample_gpt with --temperature 0 (greedy): continues the
prompt from the same checkpoint by taking the most likely token each time, feeding only
the real context (no padding), and compares with the text sample_gpt printed. Exits 1 on
any difference. Runs on Debian's python3-torch and python3-numpy."""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import GPT, read_safetensors  # noqa: E402


def model_description(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    fields = dict(part.split("=") for part in header["__metadata__"]["weft.model"].split()[1:])
    return {key: int(value) for key, value in fields.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="the .safetensors weights sample_gpt read")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--weft-output", required=True, help="sample_gpt's stdout")
    args = parser.parse_args()
    sizes = model_description(args.checkpoint)
    torch.set_num_threads(1)
    model = GPT(read_safetensors(args.checkpoint), sizes["layers"], sizes["heads"])
    context = list(args.prompt.encode())
    with torch.no_grad():
        for _ in range(args.tokens):
            window = context[-sizes["seq_len"]:]
            logits = model(torch.tensor([window]))[0, -1]
            context.append(int(torch.argmax(logits)))
    expected = bytes(context) + b"\n"
    with open(args.weft_output, "rb") as f:
        got = f.read()
    print("torch:", expected)
    print("weft: ", got)
    if got != expected:
        first = next((i for i in range(min(len(got), len(expected))) if got[i] != expected[i]), None)
        print(f"FAIL: sample_gpt's greedy text differs from PyTorch's (first at byte {first})")
        return 1
    print(f"PASS: {args.tokens} greedy tokens agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
