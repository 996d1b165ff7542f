#!/usr/bin/env bash
# One elastic training run with real processes under `mpirun --with-ft ulfm` (issue 48), checked
# against an uninterrupted run that switched to the same layout at the same step with --switch:
# the step losses from the event's step on must match within 1e-6 relative, no step may be
# missing or doubled, and no process of the run may be left behind.
#
#   elastic_run.sh SCENARIO TRAIN_GPT MPIRUN DATA WORKDIR
#
# Scenarios (4 ranks, pp 2 x dp 2, ZeRO-1, 12 steps; 100 for the leaves):
#   crash-R           rank R SIGKILLs itself at the boundary before step 5 (WEFT_ELASTIC_KILL);
#                     the others fail inside step 5, recover and finish every step
#   leave-signal      SIGUSR1 (sent from here, by kill) to rank 1 once step 3 is logged; rank 1
#                     hands its state over and exits 0 at once, the others go on
#   leave-control     `leave 2` appended to the --control file once step 3 is logged
#   crash-rank0-control rank 0, which reads the --control file, crashes before step 5; once the
#                     failure is logged, `leave 1` must still be read (by the new rank 0)
#   leave-rank0       `leave 0` once step 3 is logged (rank 0 reads the control file: the next
#                     rank takes the file over), then `leave 1` once that event is logged: the
#                     second leave must be read too (4 -> 3 -> 2)
#   grow              2 ranks (pp 2) with --world-max 4, 300 steps: `grow 2` appended once step 3
#                     is logged starts two processes (MPI_Comm_spawn) while the run trains on;
#                     they join at the first boundary where they are ready (the event says
#                     both steps); the reference starts on 4 ranks with --switch
#                     0:pp=2,world=2 (two spares) and switches where the joiners joined
#   grow-late         as grow, 40 steps, the joiners held before their vote until step 39 is
#                     logged (WEFT_ELASTIC_JOINER_WAIT_FOR): the run ends before they are ready;
#                     they are told so and exit 0, no join event, and the losses equal an
#                     uninterrupted run's
#   crash-then-grow   rank 3 crashes before step 5; once the failure is logged, `grow 1` brings
#                     the world back to 4
#   crash-buddies     ranks 1 and 2 (rank 1's buddy) crash before step 5: rank 1's optimizer shard
#                     has no copy left, so the survivors restore every rank's state from the
#                     newest checkpoint (step 4) online and go on; the redone step is logged
#                     again, and the last of each step counts
#   crash-during-leave `leave 1` once step 3 is logged, and rank 3 crashes as that leave's switch
#                     begins: the survivors (rank 1 among them) roll back to the last boundary
#                     and recover over 3 ranks, then rank 1's leave is made again (3 -> 2)
#   crash-in-recovery rank 3 crashes before step 5 and rank 2 during the recovery: the run ends
#                     with exit 2, saying so, and the newest checkpoint (step 4) is intact
#   stall             rank 1 is stopped (SIGSTOP) once step 3 is logged, for twice --comm-timeout
#                     (3 s here), then continued: the others' watchdogs hand the stall to the
#                     recovery, rank 1 joins it when it runs again, and the run goes on in the
#                     same layout from the last boundary, no rank lost
#   join-connect      as grow, but the two processes are a second job launched separately
#                     (`mpirun -np 2 train_gpt <the same options> --join CONTROL`): it reads the
#                     port the run published at CONTROL.port, appends `accept 2` and connects
#                     (MPI_Comm_connect); both jobs exit 0. Open MPI 4 (MPIRUN is its mpirun,
#                     not the ULFM one): both mpiruns meet through an ompi-server started here
#   join-refused      as join-connect, but the second job is given --steps 40: it says that
#                     --steps differs and exits 2; the run goes on without it (no event) and
#                     its losses equal an uninterrupted run's
set -uo pipefail
scenario=$1 train_gpt=$2 mpirun=$3 data=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
# A leave comes from outside, at a moment this script picks: those runs are long enough (a step
# takes about 15 ms here) that it lands well before their end.
steps=12
[[ "$scenario" == leave-* || "$scenario" == *leave || "$scenario" == stall || "$scenario" == crash-rank0-control ]] &&
    steps=100
# A grow's processes take over a second to start while the steps go on (faster than 15 ms
# each): enough steps that they are ready well before the end.
[[ "$scenario" == *grow || "$scenario" == join-* ]] && steps=300
# ... and here the line comes 10 steps before the end: read at the next boundary, and the run
# ends before the processes are ready, even at three times the usual step time.
[[ "$scenario" == grow-late ]] && steps=40
comm_timeout=60
[[ "$scenario" == stall ]] && comm_timeout=3
model=(--layers 4 --d-model 64 --heads 4 --vocab 256 --seq-len 32 --batch 8 --microbatches 4 --lr 1e-3
       --steps "$steps" --data "$data" --comm-timeout "$comm_timeout")
layout=(--pp 2 --dp 2 --zero 1)
ranks=4
reference_layout=("${layout[@]}")
if [[ "$scenario" == grow* || "$scenario" == join-* ]]; then
    layout=(--pp 2)
    ranks=2
    # The reference starts on 4 ranks and switches before step 0 to the elastic run's start.
    reference_layout=(--pp 2 --dp 2 --switch 0:pp=2,world=2)
fi
fail() { echo "elastic_run $scenario: $*" >&2; exit 1; }

# The process ids of the run's ranks, by launch rank (Open MPI puts the rank in each one's
# environment).
rank_pid() {
    local want=$1 pid
    for pid in $(pgrep -f -- "$work/elastic.jsonl"); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$want"; then
            echo "$pid"
            return
        fi
    done
}
# Waits up to 30 s for a line of the run's --log-json that matches the extended regex PATTERN.
wait_for_log() {
    local pattern=$1 what=$2
    for _ in $(seq 600); do
        grep -Eq "$pattern" "$work/elastic.jsonl" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "$what never logged"
}
wait_for_step() { wait_for_log "\"step\": $1," "step $1"; }
wait_for_event() { wait_for_log "\"event\": ?\"$1\"" "a $1 event"; }

# Each run is bounded well inside CTest's 300 s, so that a hang is reported here with the
# run's output (timeout's exit 124) rather than by CTest killing the script.
launcher_flags=(--with-ft ulfm)
if [[ "$scenario" == join-* ]]; then
    # Two jobs of Open MPI 4 meet through one name server; --no-daemonize keeps it a child of
    # this script, ended below.
    export OMPI_MCA_rmaps_base_oversubscribe=1
    ompi_server=$(dirname "$mpirun")/ompi-server
    [[ -x "$ompi_server" ]] || fail "no ompi-server next to $mpirun"
    "$ompi_server" --no-daemonize --report-uri "$work/ompi-server.uri" &
    server=$!
    trap 'kill $server 2>/dev/null' EXIT
    for _ in $(seq 100); do [[ -s "$work/ompi-server.uri" ]] && break; sleep 0.05; done
    [[ -s "$work/ompi-server.uri" ]] || fail "ompi-server wrote no URI"
    launcher_flags=(--ompi-server "file:$work/ompi-server.uri")
fi
run_elastic() {
    timeout 120 "$mpirun" "${launcher_flags[@]}" -np "$ranks" "$train_gpt" "${model[@]}" "${layout[@]}" --elastic \
        --log-json "$work/elastic.jsonl" "$@" >"$work/elastic.out" 2>&1
}

status=0
must_say=""  # a line the run's output must hold
case "$scenario" in
    crash-[0-3])
        WEFT_ELASTIC_KILL="${scenario#crash-}@5" run_elastic
        status=$?
        ;;
    leave-signal)
        run_elastic &
        launcher=$!
        wait_for_step 3
        pid=$(rank_pid 1)
        [[ -n "$pid" ]] || fail "no process of rank 1 found"
        kill -USR1 "$pid"
        # The leaver exits at once (ULFM), long before the others finish.
        for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -0 "$pid" 2>/dev/null && fail "rank 1 (pid $pid) did not exit after its leave"
        wait "$launcher"
        status=$?
        ;;
    leave-control)
        : >"$work/control"
        run_elastic --control "$work/control" &
        launcher=$!
        wait_for_step 3
        echo "leave 2" >>"$work/control"
        wait "$launcher"
        status=$?
        ;;
    crash-rank0-control)
        : >"$work/control"
        WEFT_ELASTIC_KILL="0@5" run_elastic --control "$work/control" &
        launcher=$!
        wait_for_event failure
        echo "leave 1" >>"$work/control"
        wait "$launcher"
        status=$?
        must_say="reads it from now on"
        ;;
    leave-rank0)
        : >"$work/control"
        run_elastic --control "$work/control" &
        launcher=$!
        wait_for_step 3
        echo "leave 0" >>"$work/control"
        wait_for_event leave
        echo "leave 1" >>"$work/control"
        wait "$launcher"
        status=$?
        ;;
    grow | grow-late)
        : >"$work/control"
        held="$work/joiners-may-vote"
        [[ "$scenario" == grow-late ]] && export WEFT_ELASTIC_JOINER_WAIT_FOR="$held"
        run_elastic --control "$work/control" --world-max 4 &
        launcher=$!
        wait_for_step 3
        echo "grow 2" >>"$work/control"
        if [[ "$scenario" == grow-late ]]; then
            wait_for_step 39
            : >"$held"
        fi
        wait "$launcher"
        status=$?
        [[ "$scenario" == grow-late ]] && must_say="the run ended before the 2 processes of \`grow 2\` were taken in"
        ;;
    crash-then-grow)
        : >"$work/control"
        WEFT_ELASTIC_KILL="3@5" run_elastic --control "$work/control" &
        launcher=$!
        wait_for_event failure
        echo "grow 1" >>"$work/control"
        wait "$launcher"
        status=$?
        ;;
    crash-during-leave)
        : >"$work/control"
        WEFT_ELASTIC_KILL_IN_MOVE=3 run_elastic --control "$work/control" &
        launcher=$!
        wait_for_step 3
        echo "leave 1" >>"$work/control"
        wait "$launcher"
        status=$?
        ;;
    crash-buddies)
        WEFT_ELASTIC_KILL="1@5,2@5" run_elastic --checkpoint-dir "$work/ckpt" --checkpoint-every 2
        status=$?
        grep -q "restore_from_checkpoint" "$work/elastic.jsonl" || fail "no restore from the checkpoint in the event"
        ;;
    crash-in-recovery)
        WEFT_ELASTIC_KILL="3@5" WEFT_ELASTIC_KILL_IN_RECOVERY=2 run_elastic --checkpoint-dir "$work/ckpt" \
            --checkpoint-every 2
        status=$?
        ;;
    stall)
        run_elastic &
        launcher=$!
        wait_for_step 3
        pid=$(rank_pid 1)
        [[ -n "$pid" ]] || fail "no process of rank 1 found"
        kill -STOP "$pid"
        sleep $((2 * comm_timeout))
        kill -CONT "$pid"
        wait "$launcher"
        status=$?
        must_say="handing the stall to the elastic recovery"
        ;;
    join-connect | join-refused)
        : >"$work/control"
        run_elastic --control "$work/control" --world-max 4 &
        launcher=$!
        wait_for_step 3
        joiner_steps=$steps
        [[ "$scenario" == join-refused ]] && joiner_steps=40
        # The second job: the run's own options (its --steps aside, where refused).
        joiner_options=("${model[@]}" "${layout[@]}")
        joiner_options[$(( $(printf '%s\n' "${model[@]}" | grep -nx -- --steps | cut -d: -f1) ))]=$joiner_steps
        timeout 120 "$mpirun" "${launcher_flags[@]}" -np 2 "$train_gpt" "${joiner_options[@]}" --elastic \
            --join "$work/control" >"$work/joiner.out" 2>&1
        joiner_status=$?
        wait "$launcher"
        status=$?
        echo "--- the joining job (exit $joiner_status):"
        cat "$work/joiner.out"
        grep -q "^accept 2 " "$work/control" || fail "the joining job did not announce itself: $(cat "$work/control")"
        if [[ "$scenario" == join-connect ]]; then
            [[ $joiner_status -eq 0 ]] || fail "the joining job exited $joiner_status"
        else
            [[ $joiner_status -eq 2 ]] || fail "the refused job exited $joiner_status, not 2"
            grep -q -- "--steps 40 (the running job's: 300) differs" "$work/joiner.out" ||
                fail "the refused job does not name --steps"
            must_say="the joining processes' options differ from the run's"
        fi
        [[ ! -e "$work/control.port" ]] || fail "the run left its port file behind"
        ;;
    *) fail "unknown scenario (valid: crash-0..3, crash-buddies, leave-signal, leave-control, grow, grow-late, crash-then-grow,
crash-during-leave, crash-in-recovery, stall, join-connect, join-refused, leave-rank0, crash-rank0-control)" ;;
esac
cat "$work/elastic.out"
[[ -z "$must_say" ]] || grep -q "$must_say" "$work/elastic.out" || fail "the output does not say: $must_say"
# Processes of a run that ended may take a moment to be reaped; one alive 10 s later is left behind.
leftover=""
for _ in $(seq 100); do
    leftover=$(pgrep -f -- "$work/elastic.jsonl" || true)
    [[ -z "$leftover" ]] && break
    sleep 0.1
done
[[ -z "$leftover" ]] || fail "processes left behind: $leftover"

if [[ "$scenario" == crash-in-recovery ]]; then
    [[ $status -eq 2 ]] || fail "expected exit 2 after a second crash during recovery, got $status"
    grep -q "another rank failed during the recovery" "$work/elastic.out" || fail "no message naming the second crash"
    [[ "$(readlink "$work/ckpt/latest" || cat "$work/ckpt/latest")" == *step-00000004* ]] ||
        fail "the newest checkpoint is not step 4: $(ls "$work/ckpt")"
    [[ -f "$work/ckpt/step-00000004/manifest.json" ]] || fail "step-00000004 is not whole: $(ls "$work/ckpt/step-00000004")"
    echo "elastic_run $scenario: ok (exit 2, checkpoint step 4 intact)"
    exit 0
fi
[[ $status -eq 0 ]] || { tail -n 40 "$work/elastic.out"; fail "mpirun exited $status"; }

# The events, and the run that switched to each one's layout at its step with --switch.
switches=()
expected_events=1
[[ "$scenario" == grow-late || "$scenario" == join-refused ]] && expected_events=0
[[ "$scenario" == crash-then-grow || "$scenario" == crash-during-leave || "$scenario" == leave-rank0 ||
    "$scenario" == crash-rank0-control ]] && expected_events=2
while read -r event_step switch_spec; do
    switches+=(--switch "$event_step:$switch_spec")
done < <(python3 - "$work/elastic.jsonl" "$expected_events" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if '"event"' in l]
assert len(events) == int(sys.argv[2]), events
# Events at one boundary (a failure, then the leave it interrupted) are one switch to the last
# one's layout: a layout switch moves the state exactly, so the one between changes nothing.
last_at = {e["step"]: e for e in events}
# A join's communicators and the joiners' state buffers are made during their start, while the
# run trains (issue 48): the event says how long the first took and how much of the second.
for e in events:
    if e["event"] == "join":
        assert "prepare_layout" in e["phase_milliseconds"], e
        assert e["made_ahead_bytes"] > 0, e
for e in last_at.values():
    fields = dict(kv.split("=", 1) for kv in e["to"].split())
    keys = ["pp", "dp", "tp", "zero", "chunks", "schedule", "world"] + (["partition"] if "partition" in fields else [])
    print(e["step"], ",".join(f"{k}={fields[k]}" for k in keys))
EOF
)
((${#switches[@]} > 0 || expected_events == 0)) || fail "expected $expected_events elastic event(s) in the log"
event_step=none
((${#switches[@]} > 0)) && event_step=${switches[1]%%:*}
timeout 120 "$mpirun" -np 4 "$train_gpt" "${model[@]}" "${reference_layout[@]}" "${switches[@]}" \
    --log-json "$work/reference.jsonl" >"$work/reference.out" 2>&1 || { cat "$work/reference.out"; fail "the reference run failed"; }
python3 - "$work/elastic.jsonl" "$work/reference.jsonl" "$event_step" "$steps" "$scenario" <<'EOF' || fail "losses differ from the --switch run"
import json, sys
# Steps redone after a restore from a checkpoint are logged again: the last of each counts.
redo = sys.argv[5] == "crash-buddies"
def steps(path):
    out = {}
    for line in open(path):
        o = json.loads(line)
        if "loss" in o and "event" not in o:
            assert redo or o["step"] not in out, f"step {o['step']} logged twice in {path}"
            out[o["step"]] = o["loss"]
    return out
a, b = steps(sys.argv[1]), steps(sys.argv[2])
n = int(sys.argv[4])
assert sorted(a) == list(range(n)), f"elastic run's steps: {sorted(a)}"
for s in range(n):
    rel = abs(a[s] - b[s]) / abs(b[s])
    assert rel <= 1e-6, f"step {s}: {a[s]} against {b[s]} (relative {rel:.2e})"
print(f"losses of {n} steps match the --switch {sys.argv[3]} run")
EOF
echo "elastic_run $scenario: ok (${switches[*]})"
