#!/usr/bin/env bash
# scripts/gpu-check.sh keeps to its budget (WEFT_GPU_CHECK_SECONDS). Given the least it takes,
# 60 s, it must cut the step that would run past it (its CUDA build takes minutes), still print
# its table, and exit 1 within the 60 s: on a GPU machine the device tool's limit comes next,
# and a check stopped by that shows no table. A budget that is not whole seconds in range is
# refused by name.
#   gpu_check_budget.sh SOURCE_DIR BUILD_DIR
set -u
source_dir=$1
build_dir=$2
failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

rm -rf "$build_dir"
mkdir -p "$build_dir"
started=$(date +%s)
# Without OUT: under the device tool the check would pack its logs into the tool's folder.
env -u OUT WEFT_GPU_CHECK_SECONDS=60 WEFT_GPU_CHECK_BUILD_DIR="$build_dir/gpu" \
    bash "$source_dir/scripts/gpu-check.sh" >"$build_dir/output.log" 2>&1
status=$?
took=$(($(date +%s) - started))
cat "$build_dir/output.log"
echo "--- gpu-check exited $status after $took s"
[[ $status -eq 1 ]] || fail "exit $status, not 1: a step cut by the budget is a failure of the check"
grep -q "^=== gpu-check: summary" "$build_dir/output.log" || fail "no table"
grep -qE "^gpu-check: (stopped after [0-9]+ s|not started)" "$build_dir/output.log" ||
    fail "no step says it was cut by the budget"
grep -qE "^\| [a-z].*\| FAIL +\| exit (124|125|137); gpu-check: " "$build_dir/output.log" ||
    fail "no row of the table names the step that was cut"
((took <= 60)) || fail "took $took s of a 60 s budget"

for bad in 59 abc 3601 -5 090; do  # 090: not octal, not an arithmetic error
    output=$(env -u OUT WEFT_GPU_CHECK_SECONDS=$bad WEFT_GPU_CHECK_BUILD_DIR="$build_dir/refused" \
        bash "$source_dir/scripts/gpu-check.sh" 2>&1)
    status=$?
    [[ $status -eq 2 ]] || fail "WEFT_GPU_CHECK_SECONDS='$bad': exit $status, not 2"
    grep -q "weft: WEFT_GPU_CHECK_SECONDS is '$bad': .*from 60 to 3600" <<<"$output" ||
        fail "WEFT_GPU_CHECK_SECONDS='$bad': no error naming it: $output"
    [[ ! -e "$build_dir/refused-configure.log" ]] || fail "WEFT_GPU_CHECK_SECONDS='$bad': configured anyway"
done
exit "$failed"
