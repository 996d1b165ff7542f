#!/usr/bin/env bash
# The MPI watchdog in real jobs (mpi_watchdog_probe.cpp at 2 ranks): a receive from a rank
# that never sends, and a collective a rank never joins, end the job with a non-zero
# status within timeout + grace + a margin, the report names the rank, the operation, the
# peer by world rank (or the group), the time and the action, and no probe process is left;
# waits within the timeout, and a wait on a no_timeout communicator, end normally.
#   mpi_watchdog.sh MPIEXEC PROBE
set -u
mpiexec=$1 probe=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
fail() {
    echo "FAIL ($1): $2"
    echo "---- stdout"; cat "$out/$1.out"
    echo "---- stderr"; cat "$out/$1.err"
    failed=1
}

run() {  # run MODE: sets status and elapsed (whole seconds)
    local start=$SECONDS
    timeout -s KILL 90 "$mpiexec" -np 2 --oversubscribe "$probe" "$1" >"$out/$1.out" 2>"$out/$1.err"
    status=$?
    elapsed=$((SECONDS - start))
}

left_behind() {  # any probe process of this build still alive?
    sleep 0.5
    pgrep -f "^$probe " >/dev/null
}

for mode in recv collective; do
    run "$mode"
    echo "$mode: mpirun status $status after $elapsed s"
    [ "$status" -ne 0 ] || fail "$mode" "mpirun exited 0"
    [ "$status" -ne 137 ] || fail "$mode" "mpirun hung and was killed"
    # timeout 0.5 s + grace 0.5 s + start-up and mpirun's clean-up.
    [ "$elapsed" -lt 30 ] || fail "$mode" "the job took $elapsed s to end"
    left_behind && fail "$mode" "probe processes are left: $(pgrep -af "^$probe ")"
    grep -q "ending this process with exit code 2" "$out/$mode.err" || fail "$mode" "no line saying the process ends"
done
grep -Eq '^mpi_watchdog_probe \(rank 0\): weft: communication timeout: rank 0 waited 0\.[5-9][0-9]* s \(timeout 0\.5 s\) in irecv\(source=0, tag=17\) of 8 bytes for rank 1, during probe action 7; the peer is stopped, crashed, stuck or far slower' \
    "$out/recv.err" || fail recv "the report does not name rank 0, the receive, world rank 1 and the action"
grep -Eq '^mpi_watchdog_probe \(rank 1\): weft: communication timeout: rank 1 waited [0-9.]+ s \(timeout 0\.5 s\) in allreduce_sum\(float\) of 3 elements over 2 ranks \(world ranks 0, 1\);' \
    "$out/collective.err" || fail collective "the report does not name rank 1, the allreduce and its group"
if grep -q 'during' "$out/collective.err"; then fail collective "an action is named though none was published"; fi

for mode in within untimed; do
    run "$mode"
    echo "$mode: mpirun status $status after $elapsed s"
    [ "$status" -eq 0 ] || fail "$mode" "mpirun exited $status"
    grep -q "probe $mode: passed" "$out/$mode.out" || fail "$mode" "rank 0 did not finish"
    if grep -q 'communication timeout' "$out/$mode.err"; then fail "$mode" "a wait within the timeout was reported"; fi
done
[ "$failed" -eq 0 ] && echo PASS
exit "$failed"
