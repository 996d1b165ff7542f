#!/usr/bin/python3
"""Elastic training's figures (issue 48, item 5): whole runs of train_gpt under
`mpirun --with-ft ulfm`, 4 ranks, pp 2 x dp 2 ZeRO-1 (the join: 3 ranks, dp 3 ZeRO-1, growing
to 4), and one markdown table.

  bench_elastic.py --train-gpt PATH --mpirun PATH --data TRAIN.bin --work DIR [--tiny]

One invocation runs every scenario, one after the other:
  plain        the run without --elastic: its median step
  mirror-1/5   --elastic --mirror-every 1 and 5: the mirror's cost per step (time and memory)
  crash        launch rank 3 SIGKILLs itself at the boundary before --event-step (WEFT_ELASTIC_KILL)
  leave        `leave 3` appended to the --control file once the step before --event-step is logged
  join         3 ranks (pp 1 x dp 3 ZeRO-1, --world-max 4); `grow 1` appended to the --control file
               once the step before --event-step is logged: one process is spawned (MPI_Comm_spawn)
               while the run trains on, and joins at the first boundary after it is ready; the
               state moves onto the 4 ranks (--join-steps steps, so that it is ready in time)
  restart      checkpoint-restart: a plain run with --checkpoint-every --event-step, rank 3 killed by
               SIGKILL once that checkpoint is committed (the job ends), then --resume on the layout
               the crash's recovery chose, over that many ranks

Times come from the runs' own logs (each step's "ms", each event's "milliseconds" and phases)
and from this script's clock, which stamps each line rank 0 prints as it arrives: a step's
wall period includes what runs between steps (the mirror; the step's own "ms" does not).
Peak memory is each rank's VmHWM, read from /proc while it runs. Docs: docs/elastic-figures.md.
Nothing here asserts the goals: the table reports them.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

MODELS = {
    # Wide and shallow: 101 M parameters, 1.13 GiB of parameters + AdamW moments over the
    # ranks, a step of a few seconds on 2 cores. The batch, 12, splits over 2 and 3 replicas
    # (2 micro-batches each), so 3 ranks may train data-parallel after a leave or a crash.
    "full": ["--layers", "2", "--d-model", "2048", "--heads", "16", "--vocab", "256", "--seq-len", "8",
             "--batch", "12", "--microbatches", "2", "--lr", "1e-4"],
    # The smoke test's: the same shapes of run, in seconds.
    "tiny": ["--layers", "2", "--d-model", "64", "--heads", "4", "--vocab", "256", "--seq-len", "16",
             "--batch", "12", "--microbatches", "2", "--lr", "1e-3"],
}
LAYOUT = ["--pp", "2", "--dp", "2", "--zero", "1"]
JOIN_LAYOUT = ["--pp", "1", "--dp", "3", "--zero", "1"]  # the join's start, 3 ranks (batch 12 = 3 x 2 x 2)
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
STEP_LINE = re.compile(r"^step (\d+) \|")
MEMORY_LINE = re.compile(r"memory per rank .*\| params ([\d.]+) MiB \| grads ([\d.]+) MiB \| optimizer ([\d.]+) MiB")
PARAMS_LINE = re.compile(r"\| (\d+) parameters \|")
MIB = 1024.0 * 1024.0


def fail(message):
    print(f"bench_elastic: {message}", file=sys.stderr)
    sys.exit(1)


def rank_processes(tag):
    """{launch rank: pid} of the MPI processes whose command line holds `tag` (not mpirun's).
    Processes a grow spawned are another job of the same mpirun (PMIX_NAMESPACE ...@2 and on),
    their ranks counted from 0 again: they are keyed "joinerN" (N their rank in that job)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if tag.encode() not in b"\0".join(argv):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        rank, spawned = None, False
        for item in env:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                rank = int(item.split(b"=", 1)[1])
            elif item.startswith(b"PMIX_NAMESPACE="):
                spawned = not item.endswith(b"@1")
        if rank is not None:
            out[f"joiner{rank}" if spawned else rank] = int(entry)
    return out


def vm_hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Run:
    """One mpirun of train_gpt: rank 0's lines stamped as they arrive, each rank's peak memory."""

    def __init__(self, name, args, work, np=4, ft=True, env=None, timeout=1800, steps=None):
        self.name, self.work = name, work
        self.log = os.path.join(work, f"{name}.jsonl")
        self.out_path = os.path.join(work, f"{name}.out")
        if os.path.exists(self.log):
            os.remove(self.log)
        command = [args.mpirun] + (["--with-ft", "ulfm"] if ft else []) + ["-np", str(np), args.train_gpt]
        command += args.model + ["--steps", str(steps or args.steps), "--data", args.data, "--log-json", self.log]
        self.command = command
        self.env = dict(os.environ, **ENV, **(env or {}))
        self.timeout = timeout
        self.lines = []  # (seconds since the launch, line)
        self.peak = {}   # launch rank -> VmHWM bytes
        self.pids = {}
        self.lock = threading.Lock()

    def start(self, extra):
        self.command = self.command + extra
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=self.env, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def _sample(self):
        while self.proc.poll() is None:
            for rank, pid in rank_processes(self.log).items():
                self.pids[rank] = pid
                hwm = vm_hwm(pid)
                if hwm is not None:
                    self.peak[rank] = max(self.peak.get(rank, 0), hwm)
            time.sleep(0.2)

    def wait_for(self, predicate, what, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            if predicate():
                return time.monotonic() - self.t0
            if self.proc.poll() is not None and not predicate():
                self.finish(check=False)
                fail(f"{self.name}: the run ended (exit {self.proc.returncode}) before {what}:\n{self.tail()}")
            time.sleep(0.01)
        self.stop()
        fail(f"{self.name}: {what} did not happen within {timeout or self.timeout} s:\n{self.tail()}")

    def step_logged(self, step):
        with self.lock:
            return any(STEP_LINE.match(l) and int(STEP_LINE.match(l).group(1)) == step for _, l in self.lines)

    def finish(self, check=True, expect=(0,)):
        try:
            self.proc.wait(timeout=max(1.0, self.timeout - (time.monotonic() - self.t0)))
        except subprocess.TimeoutExpired:
            self.stop()
            fail(f"{self.name}: timed out after {self.timeout} s:\n{self.tail()}")
        self.t_end = time.monotonic() - self.t0
        self.reader.join(timeout=10)
        self.sampler.join(timeout=10)
        with open(self.out_path, "w") as f:
            f.write(" ".join(self.command) + "\n")
            f.writelines(f"{t:10.3f} {l}\n" for t, l in self.lines)
        self.reap()
        if check and self.proc.returncode not in expect:
            fail(f"{self.name}: mpirun exited {self.proc.returncode}:\n{self.tail()}")
        return self

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.reap()

    def reap(self):
        """No rank of this run may outlive it: those left are named and killed (by pid)."""
        time.sleep(0.3)
        left = rank_processes(self.log)
        for pid in left.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if left:
            print(f"bench_elastic: {self.name}: killed processes left behind: {sorted(left.values())}", file=sys.stderr)

    def tail(self, n=30):
        with self.lock:
            return "\n".join(l for _, l in self.lines[-n:])

    # What the run logged.
    def steps(self, clock="logged"):
        """[(step, ms, seconds)] in log order (a redone step appears once). The seconds: with
        clock "logged", each step's end as the run logged it ("ended_s", on the run's clock),
        which an elastic run with ULFM prints a step or more late (it holds each line until
        the mirror commits); with "arrival", or where the log has no "ended_s", the arrival of
        its printed line on this script's clock (since the run's launch)."""
        with self.lock:
            lines = list(self.lines)
        out = []
        records = [json.loads(l) for l in open(self.log)] if os.path.exists(self.log) else []
        ms = [r for r in records if "event" not in r and "loss" in r]
        arrivals = [t for t, l in lines if STEP_LINE.match(l)]
        if len(arrivals) != len(ms):
            fail(f"{self.name}: {len(arrivals)} step lines printed, {len(ms)} logged")
        logged = clock == "logged" and all("ended_s" in r for r in ms)
        for r, t in zip(ms, arrivals):
            out.append((r["step"], r["ms"], r["ended_s"] if logged else t))
        return out

    def events(self):
        records = [json.loads(l) for l in open(self.log)] if os.path.exists(self.log) else []
        return [r for r in records if "event" in r]

    def event_arrival(self):
        with self.lock:
            return next((t for t, l in self.lines if l.startswith("elastic | ")), None)

    def memory(self):
        with self.lock:
            for _, l in self.lines:
                m = MEMORY_LINE.search(l)
                if m:
                    return tuple(float(x) * MIB for x in m.groups())
        return None

    def parameters(self):
        with self.lock:
            for _, l in self.lines:
                m = PARAMS_LINE.search(l)
                if m:
                    return int(m.group(1))
        return None


def reshard_ms(event):
    """The event's switch of layout: checking the new one, the plan, the move and building its engine."""
    p = event.get("phase_milliseconds", {})
    return sum(p.get(phase, 0) for phase in ("check", "plan", "move", "build"))


def median(values):
    return statistics.median(values) if values else float("nan")


def steady(run, warmup, upto=None):
    """Median step ms and median wall period (arrival to arrival) after the warm-up."""
    s = run.steps()
    picked = [i for i, (step, _, _) in enumerate(s) if step >= warmup and (upto is None or step < upto) and i > 0]
    return median([s[i][1] for i in picked]), median([s[i][2] - s[i - 1][2] for i in picked]), \
        (statistics.mean([s[i][2] - s[i - 1][2] for i in picked]) if picked else float("nan"))


def boundaries(run, warmup):
    """{step: ms between step-1's end and step's start} after the warm-up: the boundary's work
    (the mirror), measured within one run, so another run's slower compute does not enter it."""
    s = run.steps()
    return {s[i][0]: (s[i][2] - s[i - 1][2]) * 1e3 - s[i][1] for i in range(1, len(s)) if s[i][0] >= warmup}


def fmt_ms(x):
    return "-" if x is None or x != x else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def fmt_bytes(b):
    return "-" if b is None else f"{b / MIB:.0f} MiB" if b < 1024 * MIB else f"{b / (1024 * MIB):.2f} GiB"


def phases_text(event):
    p = event.get("phase_milliseconds", {})
    return ", ".join(f"{k.replace('_communicators', '')} {fmt_ms(v)}" for k, v in p.items()) or "-"


def layout_args(to):
    """train_gpt flags for a layout as elastic::layout::describe() writes it, and its world."""
    fields = dict(kv.split("=", 1) for kv in to.split())
    flags = []
    for key in ("pp", "dp", "tp", "zero", "chunks", "schedule"):
        if key in fields:
            flags += [f"--{key}", fields[key]]
    if "partition" in fields:
        flags += ["--partition"] + fields["partition"].split(",")
    return flags, int(fields["world"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-gpt", required=True)
    p.add_argument("--mpirun", required=True, help="Open MPI 5's mpirun (with --with-ft ulfm)")
    p.add_argument("--data", required=True, help="make_dataset's train.bin")
    p.add_argument("--work", required=True, help="a directory for the logs and the checkpoints")
    p.add_argument("--tiny", action="store_true", help="the smoke test's tiny model")
    p.add_argument("--steps", type=int, default=12, help="steps of each run")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the medians")
    p.add_argument("--event-step", type=int, default=6, help="the crash, the leave and the join happen before this step")
    p.add_argument("--join-steps", type=int, default=None,
                   help="steps of the join's run (default: --steps, 300 with --tiny, whose steps take "
                        "milliseconds while the joiner's start takes over a second)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    args = p.parse_args()
    if args.join_steps is None:
        args.join_steps = 300 if args.tiny else args.steps
    for path, what in ((args.train_gpt, "--train-gpt"), (args.mpirun, "--mpirun")):
        if not os.access(path, os.X_OK):
            fail(f"{what} = {path} is invalid: must be an executable file")
    if not os.path.isfile(args.data):
        fail(f"--data = {args.data} is invalid: must be a readable file")
    if not args.warmup < args.event_step - 1 or args.event_step + 3 > args.steps:
        fail(f"--warmup {args.warmup} < --event-step {args.event_step} - 1 and --event-step + 3 <= --steps "
             f"{args.steps} are needed (steps before and after the events)")
    os.makedirs(args.work, exist_ok=True)
    args.model = MODELS["tiny" if args.tiny else "full"]
    E = args.event_step
    common = dict(work=args.work, timeout=args.timeout)

    def say(text):
        print(f"bench_elastic | {text}", flush=True)

    # Baselines.
    say("plain run (no --elastic)")
    plain = Run("plain", args, **common).start(LAYOUT).finish()
    say("--elastic --mirror-every 1")
    mirror1 = Run("mirror1", args, **common).start(LAYOUT + ["--elastic", "--mirror-every", "1"]).finish()
    say("--elastic --mirror-every 5")
    mirror5 = Run("mirror5", args, **common).start(LAYOUT + ["--elastic", "--mirror-every", "5"]).finish()

    # Crash: launch rank 3 dies at the boundary before step E, after the mirror.
    say(f"crash of rank 3 before step {E}")
    crash = Run("crash", args, env={"WEFT_ELASTIC_KILL": f"3@{E}"}, **common)
    crash.start(LAYOUT + ["--elastic", "--mirror-every", "1"]).finish()
    # Leave: `leave 3` once step E-1 is logged; handled at the next boundary.
    def control_run(name, command, np=4, layout=LAYOUT, extra=(), steps=None):
        control = os.path.join(args.work, f"{name}.control")
        open(control, "w").close()
        run = Run(name, args, np=np, steps=steps, **common).start(
            layout + ["--elastic", "--mirror-every", "1", "--control", control] + list(extra))
        run.wait_for(lambda: run.step_logged(E - 1), f"step {E - 1}")
        with open(control, "a") as f:
            f.write(command + "\n")
        return run.finish()

    say(f"leave of rank 3 (control file) after step {E - 1}")
    leave = control_run("leave", "leave 3")
    # Join: 3 ranks, `grow 1` once step E-1 is logged; the spawned process joins at the first
    # boundary after it is ready.
    say(f"join: 3 ranks, grow 1 (control file) after step {E - 1}")
    join = control_run("join", "grow 1", np=3, layout=JOIN_LAYOUT, extra=["--world-max", "4"], steps=args.join_steps)

    crash_events, leave_events = crash.events(), leave.events()
    if len(crash_events) != 1 or crash_events[0]["event"] != "failure":
        fail(f"crash: expected one failure event, got {crash_events}:\n{crash.tail()}")
    if len(leave_events) != 1 or leave_events[0]["event"] != "leave":
        fail(f"{leave.name}: expected one leave event, got {leave_events}:\n{leave.tail()}")
    join_events = join.events()
    if len(join_events) != 1 or join_events[0]["event"] != "join" or join_events[0]["world_to"] != 4:
        fail(f"join: expected one join event 3 -> 4, got {join_events}:\n{join.tail()}")
    ce, le, je = crash_events[0], leave_events[0], join_events[0]

    # Checkpoint-restart: a plain run that saves at step E (after step E-1), killed once that
    # checkpoint is committed, then resumed on the layout the recovery chose.
    say(f"checkpoint-restart: checkpoint at step {E}, SIGKILL of rank 3, --resume")
    ckpt = os.path.join(args.work, "ckpt")
    subprocess.run(["rm", "-rf", ckpt], check=True)
    # Steps enough that the job still trains when the kill comes (a tiny model's are short).
    first = Run("restart-killed", args, ft=False, steps=1 << 30, **common)
    first.start(LAYOUT + ["--checkpoint-dir", ckpt, "--checkpoint-every", str(E)])
    latest = os.path.join(ckpt, "latest")
    want = f"step-{E:08d}"

    def committed():
        try:
            name = os.readlink(latest) if os.path.islink(latest) else open(latest).read().strip()
        except OSError:
            return False
        return name.endswith(want) and os.path.isfile(os.path.join(ckpt, want, "manifest.json"))

    first.wait_for(committed, f"checkpoint {want}")
    victim = rank_processes(first.log).get(3)
    if victim is None:
        first.stop()
        fail("restart-killed: no process of rank 3 found")
    t_kill = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    first.finish(check=False)
    t_job_ended = first.t0 + first.t_end
    # A tiny model's run may have saved again before the kill landed: it resumes from there.
    saved = int(os.path.basename(os.readlink(latest) if os.path.islink(latest) else open(latest).read().strip())[5:])
    killed_steps = first.steps()
    redone = (killed_steps[-1][0] + 1 - saved) if killed_steps else 0
    to_flags, to_world = layout_args(ce["to"])
    resumed = Run("restart-resumed", args, np=to_world, ft=False, steps=saved + args.steps - E, **common)
    resumed.start(to_flags + ["--resume", ckpt])
    t_restart_launch = resumed.t0
    resumed.finish()
    rs = resumed.steps(clock="arrival")  # against the kill, on this script's clock
    if not rs or rs[0][0] != saved:
        fail(f"restart-resumed: expected its first step to be {saved}, got {[s for s, _, _ in rs]}:\n{resumed.tail()}")
    t_first_step_end = resumed.t0 + rs[0][2]
    restart_to_training = (t_first_step_end - rs[0][1] / 1e3 - t_kill) * 1e3  # ms, kill to the step's start
    restart_teardown = (t_job_ended - t_kill) * 1e3
    restart_start = (t_first_step_end - rs[0][1] / 1e3 - t_restart_launch) * 1e3

    # Figures.
    plain_ms, plain_wall, plain_mean = steady(plain, args.warmup)
    m1_ms, m1_wall, m1_mean = steady(mirror1, args.warmup)
    m5_ms, m5_wall, m5_mean = steady(mirror5, args.warmup)
    params = plain.parameters()
    mem = plain.memory()  # per rank (the most of any rank): params, grads, optimizer
    state_bytes_total = 4 * params * 3 if params else None  # parameters + AdamW moments, unsplit
    snapshot_per_rank = 2 * (mem[0] + mem[2]) if mem else None  # own copy + the predecessor's
    peak = lambda run: max(run.peak.values()) if run.peak else None
    hwm_plain, hwm_m1, hwm_m5 = peak(plain), peak(mirror1), peak(mirror5)

    cs = crash.steps()
    before = median([ms for step, ms, _ in cs if args.warmup <= step < E])
    after = median([ms for step, ms, _ in cs if step > E])
    arrival = {step: t for step, _, t in cs}
    cs_ms = {step: ms for step, ms, _ in cs}
    # From the end of step E-1 (the mirror and the kill follow at once) to the redone step E's
    # start: detection, the recovery and the mirror before E.
    crash_wall = (arrival[E] - cs_ms[E] / 1e3 - arrival[E - 1]) * 1e3
    crash_reshard = reshard_ms(ce)
    crash_rebuild = ce.get("phase_milliseconds", {}).get("rebuild_communicators")

    ls_ = leave.steps()
    l_before = median([ms for step, ms, _ in ls_ if args.warmup <= step < le["step"]])
    l_after = median([ms for step, ms, _ in ls_ if step > le["step"]])
    l_arrival = {step: t for step, _, t in ls_}
    l_ms = {step: ms for step, ms, _ in ls_}
    ls_step = le["step"]
    leave_wall = (l_arrival[ls_step] - l_ms[ls_step] / 1e3 - l_arrival[ls_step - 1]) * 1e3
    leave_reshard = reshard_ms(le)

    js = join.steps()
    asked = je.get("asked_before_step", je["step"])
    j_before = median([ms for step, ms, _ in js if args.warmup <= step < asked])
    # The steps trained while the joiner started (on this machine its start competes for the
    # same cores).
    j_during = median([ms for step, ms, _ in js if asked <= step < je["step"]])
    j_after = median([ms for step, ms, _ in js if je["step"] < step <= je["step"] + 20])
    j_arrival = {step: t for step, _, t in js}
    j_ms = {step: ms for step, ms, _ in js}
    # From step E-1's end to the first step on 4 ranks: the mirror, the event, the mirror after it.
    join_wall = (j_arrival[je["step"]] - j_ms[je["step"]] / 1e3 - j_arrival[je["step"] - 1]) * 1e3
    j_phases = je.get("phase_milliseconds", {})
    join_reshard = reshard_ms(je)
    join_start = j_phases.get("start_joiners", float("nan"))

    ratio = restart_to_training / crash_wall if crash_wall > 0 else float("nan")
    ratio_event = restart_to_training / ce["milliseconds"] if ce["milliseconds"] > 0 else float("nan")

    b_plain = median(list(boundaries(plain, args.warmup).values()))
    b_m1 = boundaries(mirror1, args.warmup)
    b_m5 = boundaries(mirror5, args.warmup)
    m1_cost = median(list(b_m1.values())) - b_plain
    m5_cost = statistics.mean(b_m5.values()) - b_plain if b_m5 else float("nan")
    m5_each = median([b for step, b in b_m5.items() if step % 5 == 0]) - b_plain

    def goal(ok):
        return "met" if ok else "NOT met"

    print()
    print(f"bench_elastic: {'tiny' if args.tiny else 'full'} model, {params} parameters, "
          f"state (parameters + AdamW moments) {fmt_bytes(state_bytes_total)} over the ranks; "
          f"4 ranks pp 2 x dp 2 ZeRO-1 (join: 3 ranks pp 1 x dp 3 ZeRO-1 -> 4); {args.steps} steps per run, medians after step {args.warmup}; "
          f"events before step {E}")
    print()
    print("| scenario | event to training (ms) | phases (ms) | bytes moved | steps redone | step ms before / after | goal |")
    print("|---|---|---|---|---|---|---|")
    print(f"| plain (no --elastic) | - | - | - | - | {fmt_ms(plain_ms)} (wall {fmt_ms(plain_wall * 1e3)}) | "
          f"boundary {fmt_ms(b_plain)} ms/step, peak RSS {fmt_bytes(hwm_plain)} |")
    print(f"| mirror every 1 | - | - | {fmt_bytes(snapshot_per_rank)} kept per rank | - | "
          f"{fmt_ms(m1_ms)} (wall {fmt_ms(m1_wall * 1e3)}) | mirror {fmt_ms(m1_cost)} ms/step, "
          f"peak RSS {fmt_bytes(hwm_m1)} vs {fmt_bytes(hwm_plain)} |")
    print(f"| mirror every 5 | - | - | {fmt_bytes(snapshot_per_rank)} kept per rank | - | "
          f"{fmt_ms(m5_ms)} (wall {fmt_ms(m5_wall * 1e3)}) | mirror {fmt_ms(m5_cost)} ms/step "
          f"({fmt_ms(m5_each)} per mirror), "
          f"peak RSS {fmt_bytes(hwm_m5)} vs {fmt_bytes(hwm_plain)} |")
    crash_goal = 2 * before + crash_reshard
    print(f"| crash (rank 3, before step {ce['step']}; world {ce['world_from']} -> {ce['world_to']}) | "
          f"{fmt_ms(ce['milliseconds'])} from detection; {fmt_ms(crash_wall)} from the kill | {phases_text(ce)} | "
          f"{fmt_bytes(ce['moved_bytes'])} | 1 (step {ce['step']}) | {fmt_ms(before)} / {fmt_ms(after)} | "
          f"<= 2 steps + reshard = {fmt_ms(crash_goal)}: {goal(crash_wall <= crash_goal)} (from detection: "
          f"{goal(ce['milliseconds'] <= crash_goal)}); rebuild < 1000: "
          f"{goal(crash_rebuild is not None and crash_rebuild < 1000)} |")
    leave_goal = leave_reshard + l_before
    print(f"| leave (ranks {','.join(map(str, le['ranks']))}, control file, before step {le['step']}; "
          f"world {le['world_from']} -> {le['world_to']}) | "
          f"{fmt_ms(le['milliseconds'])} | {phases_text(le)} | {fmt_bytes(le['moved_bytes'])} | 0 | "
          f"{fmt_ms(l_before)} / {fmt_ms(l_after)} | <= reshard + 1 step = {fmt_ms(leave_goal)}: "
          f"{goal(le['milliseconds'] <= leave_goal)} |")
    slowdown = j_during / j_before if j_before and j_during == j_during else float("nan")
    print(f"| join (grow {len(je['ranks'])}, control file, asked before step {asked}, joined before step "
          f"{je['step']}; world {je['world_from']} -> {je['world_to']}) | "
          f"{fmt_ms(je['milliseconds'])} stall; {fmt_ms(join_wall)} wall with the mirrors | "
          f"{phases_text(je)} | {fmt_bytes(je['moved_bytes'])} | 0 | {fmt_ms(j_before)} / {fmt_ms(j_after)}; "
          f"{fmt_ms(j_during)} during the joiner's start ({je['step'] - asked} steps, {slowdown:.2f}x) | "
          f"stall <= reshard = {fmt_ms(join_reshard)}: {goal(je['milliseconds'] <= join_reshard)} "
          f"(the start, {fmt_ms(join_start)}, overlaps training) |")
    print(f"| checkpoint-restart (kill rank 3, --resume on {to_world} ranks) | {fmt_ms(restart_to_training)} | "
          f"job teardown {fmt_ms(restart_teardown)}, start + load {fmt_ms(restart_start)} | "
          f"- | {redone} (checkpoint at step {saved}) | - / {fmt_ms(median([ms for _, ms, _ in rs[1:]]))} | "
          f"restart / crash recovery = {ratio:.1f}x from the kill ({ratio_event:.1f}x against the event's time); "
          f">= 100x: {goal(ratio >= 100)} |")
    print()
    print(f"crash: {ce['from']} -> {ce['to']}")
    print(f"leave: {le['from']} -> {le['to']}")
    print(f"join: {je['from']} -> {je['to']}")
    print(f"restart: {resumed.name} ran {' '.join(to_flags)} on {to_world} ranks")
    print(f"bench_elastic: logs in {args.work} (*.out: rank 0's lines with arrival seconds; *.jsonl: --log-json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
