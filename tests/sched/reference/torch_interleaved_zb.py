#!/usr/bin/env python3
"""Writes PyTorch's ScheduleInterleavedZeroBubble compute order, per rank, in weft's CSV form
(weft::sched::to_csv: one line per rank, cells like 0F0, 1I3, 0W3, idle slots dropped) to
tests/sched/reference/interleaved_zb_p<P>_m<M>_v<V>.csv, the fixtures that
tests/sched/interleaved_zb_test.cpp compares weft's interleaved-zb against.

Not run in CI: it needs torch.distributed.pipelining (PyTorch 2.4 or later from PyPI; the
fixtures were written with 2.15), which Debian's torch 1.13 lacks.
    python tests/sched/reference/torch_interleaved_zb.py

The schedule is built through its public constructor, so PyTorch's own checks run (it rejects
microbatches that are not a multiple of max(1, microbatches // ranks)). The stages are stand-ins
carrying only what the constructor reads: a schedule computes every rank's order, not just
its own, so rank 0's stages suffice."""
import logging
import os
import sys

from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble

# (ranks, microbatches, chunks): m a multiple of p, m = 2p, three chunks, m < p, and m not a
# multiple of p (10 = 2 rounds of 5 on 4 ranks).
SIZES = [(2, 4, 2), (4, 8, 2), (2, 6, 3), (4, 12, 2), (4, 3, 2), (4, 10, 2)]


class StandInStage:
    def __init__(self, stage_index, ranks, stages):
        self.stage_index = stage_index
        self.group_size = ranks
        self.group_rank = stage_index % ranks
        self.num_stages = stages
        self.submod = None  # not a module: the torch.compile check passes it by


def compute_order(ranks, microbatches, chunks):
    stages = [StandInStage(c * ranks, ranks, ranks * chunks) for c in range(chunks)]
    schedule = ScheduleInterleavedZeroBubble(stages, microbatches)
    # None marks an idle slot that PyTorch's _add_bubbles_to_actions inserted; weft's
    # programs have none (a rank waits for its inputs), so only the order of actions counts.
    return [[str(a) for a in schedule.pipeline_order[r] if a is not None] for r in range(ranks)]


def main():
    logging.disable(logging.WARNING)
    here = os.path.dirname(os.path.abspath(__file__))
    for p, m, v in SIZES:
        path = os.path.join(here, f"interleaved_zb_p{p}_m{m}_v{v}.csv")
        with open(path, "w", newline="") as out:
            for actions in compute_order(p, m, v):
                out.write(",".join(actions) + "\n")
        print(path, file=sys.stderr)


if __name__ == "__main__":
    main()
