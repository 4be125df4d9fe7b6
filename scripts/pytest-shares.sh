#!/usr/bin/env bash
# pytest-shares.sh N PYTEST [ARGS...]: run the command N times side by side, the I-th with
# `--shard I/N` (tests/conftest.py: every N-th collected test from the I-th), so that the N
# runs are every test once. The first run's output comes as it runs, each other's after it.
# The exit status is non-zero if any run failed; a share that got no test (pytest's 5) fails
# only when every share got none.
set -euo pipefail
shares=$1
shift
tmp=$(mktemp -d /tmp/nvdocker2-shares.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pids=()
for ((i = 1; i < shares; i++)); do
    "$@" --shard "$i/$shares" >"$tmp/$i.log" 2>&1 &
    pids+=("$!")
done
failed=0 empty=0
count() {  # count STATUS
    case $1 in 0) ;; 5) empty=$((empty + 1)) ;; *) failed=$((failed + 1)) ;; esac
}
code=0
"$@" --shard "0/$shares" || code=$?
count "$code"
for ((i = 1; i < shares; i++)); do
    code=0
    wait "${pids[i - 1]}" || code=$?
    count "$code"
    echo "--- share $i of $shares: $*"
    cat "$tmp/$i.log"
done
[ "$failed" -eq 0 ] || exit 1
[ "$empty" -lt "$shares" ] || exit 5
