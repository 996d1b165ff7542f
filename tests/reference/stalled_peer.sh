#!/usr/bin/env bash
# The communication watchdog end to end: a 4-stage train_gpt pipeline under mpirun, one
# rank stopped with SIGSTOP mid-training. Passes when mpirun ends non-zero well within a
# minute (the ranks waiting on the stopped one time out after --comm-timeout 5, report and
# end the job), when every other rank reported a timeout naming what it waited in, and
# when a report names the stopped rank as the peer together with the schedule action (or,
# stopped in a collective, all reports name that collective), and when no rank process is
# left once mpirun has exited. Whatever is left anyway, the trap continues and kills.
#   stalled_peer.sh MPIEXEC TRAIN_GPT DATA OUT_DIR
set -u

mpiexec=$1 train_gpt=$2 data=$3 out=$4
stopped_rank=2
timeout=5
mkdir -p "$out"
stdout=$out/stalled_peer.out
stderr=$out/stalled_peer.err
: >"$stdout"
: >"$stderr"

mpirun_pid=
ranks=()
cleanup() {
    # A stopped process ignores everything but SIGKILL and SIGCONT: continue it first.
    for pid in "${ranks[@]}"; do kill -CONT "$pid" 2>/dev/null; done
    if [ -n "$mpirun_pid" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
        kill -KILL "$mpirun_pid" 2>/dev/null
    fi
    for pid in "${ranks[@]}"; do kill -KILL "$pid" 2>/dev/null; done
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "---- stdout (last lines)"
    tail -n 5 "$stdout"
    echo "---- stderr"
    cat "$stderr"
    exit 1
}

"$mpiexec" -np 4 --oversubscribe "$train_gpt" --pp 4 --microbatches 16 --steps 100000 --comm-timeout "$timeout" \
    --layers 4 --d-model 32 --heads 2 --vocab 256 --seq-len 16 --batch 16 --peak-tflops 1 \
    --data "$data" >"$stdout" 2>"$stderr" &
mpirun_pid=$!

# Training runs once a step line is printed (rank 0 prints them).
for _ in $(seq 1 600); do
    grep -q '^step [0-9]* |' "$stdout" && break
    kill -0 "$mpirun_pid" 2>/dev/null || fail "mpirun ended before the first step"
    sleep 0.1
done
grep -q '^step [0-9]* |' "$stdout" || fail "no step line within 60 s"

# The ranks are mpirun's children; each knows its rank from Open MPI's environment.
victim=
for pid in $(pgrep -P "$mpirun_pid" -x train_gpt); do
    ranks+=("$pid")
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$rank" = "$stopped_rank" ] && victim=$pid
done
[ "${#ranks[@]}" -eq 4 ] || fail "expected 4 train_gpt processes under mpirun, found ${#ranks[@]}"
[ -n "$victim" ] || fail "no process of rank $stopped_rank"
kill -STOP "$victim"
stopped_at=$(date +%s)
echo "stopped rank $stopped_rank (pid $victim) after $(grep -c '^step [0-9]* |' "$stdout") step line(s)"

# It must end by itself: timeout (5 s) + the watchdog's grace for the other reports (5 s),
# then mpirun ends the job.
for _ in $(seq 1 600); do
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$mpirun_pid" 2>/dev/null; then
    fail "mpirun still runs 60 s after rank $stopped_rank was stopped: the job hangs"
fi
wait "$mpirun_pid"
status=$?
mpirun_pid=
elapsed=$(($(date +%s) - stopped_at))
echo "mpirun exited with status $status, $elapsed s after the stop"
[ "$status" -ne 0 ] || fail "mpirun exited 0 after a rank was stopped"
[ "$elapsed" -ge "$timeout" ] || fail "the job ended before the timeout of $timeout s ($elapsed s)"
# mpirun ended every rank, the stopped one included (before the trap would; a zombie that
# nobody reaped has ended).
sleep 1
for pid in "${ranks[@]}"; do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ -z "$state" ] || [ "$state" = Z ] || fail "rank process $pid is left behind (state $state) after mpirun exited"
done

echo "---- the timeout reports"
grep 'communication timeout' "$stderr"
# (The stopped rank does not report: Open MPI continues it to deliver SIGTERM, and its
# watchdog then sees that its own process was stopped and counts its wait from there.)
for rank in 0 1 2 3; do
    [ "$rank" = "$stopped_rank" ] && continue
    grep -Eq "train_gpt \(rank $rank\): weft: communication timeout: rank $rank waited [0-9.]+ s \(timeout $timeout s\) in " \
        "$stderr" || fail "rank $rank did not report a timeout"
done
# Stopped inside the schedule, a neighbour waits on it in a receive, and says so with the
# action. Stopped in the step's closing reduction (after its last send), every live rank
# waits in that collective, which MPI cannot attribute to one rank: then each report names
# the group, and the rank that reported nothing is the stopped one.
if grep -Eq "in irecv\(source=[0-9]+, tag=[0-9]+\) of [0-9]+ bytes for rank $stopped_rank, during action [0-9]+RECV_[FB][0-9]+ on pipeline rank [0-9]+ \(receive .* from stage $stopped_rank on pipeline rank $stopped_rank\);" "$stderr"; then
    echo "a report names rank $stopped_rank as the peer of a receive action"
else
    for rank in 0 1 2 3; do
        [ "$rank" = "$stopped_rank" ] && continue
        grep -Eq "train_gpt \(rank $rank\): .* in [a-z_]+\([a-z]*\)( of [0-9]+ elements)? over 4 ranks \(world ranks 0, 1, 2, 3\)" "$stderr" ||
            fail "no report names rank $stopped_rank as a receive's peer, and rank $rank's is not a collective of the 4 ranks"
    done
    echo "rank $stopped_rank was stopped in a collective: the 3 others report waiting in it"
fi
grep -q 'check that it is alive and not stopped' "$stderr" || fail "the reports do not say what to check"
echo "PASS"
