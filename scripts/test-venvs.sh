#!/usr/bin/env bash
# The unit and CLI suites (tests/unit) in two virtual environments built by `pip install .`
# as a user's pip would: "newest" takes the newest release of every dependency on PyPI,
# "oldest" the oldest the bounds admit (Debian 12's versions, tests/venv/oldest.txt).
# pip's cache is kept in $NVDOCKER2_PIP_CACHE (default /var/cache/nvdocker2-tests/pip), so a
# warm run downloads nothing new. The tests run in NVDOCKER2_VENV_JOBS (2) shares side by side.
# Extra arguments go to pytest.
# A venv that cannot be built: one line naming it; under CI=true that fails the run, else
# the venv is skipped with a warning (no network, say).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${NVDOCKER2_PIP_CACHE:-/var/cache/nvdocker2-tests/pip}
python=${NVDOCKER2_VENV_PYTHON:-/usr/bin/python3}
jobs=${NVDOCKER2_VENV_JOBS:-2}
root=$(mktemp -d /tmp/nvdocker2-venvs.XXXXXX)
# Readable by other users, as a checkout is: some tests run the venv's python as `nobody`.
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT
mkdir -p "$cache"
failed=()
for name in newest oldest; do
    venv=$root/$name
    log=$root/$name.log
    pins=()
    [ "$name" = oldest ] && pins=(-c tests/venv/oldest.txt)
    start=$SECONDS
    if ! { "$python" -m venv "$venv" \
            && "$venv/bin/python" -m pip install -q --disable-pip-version-check \
                --cache-dir "$cache" "${pins[@]}" ".[test]" "vermin==1.9.2"; } >"$log" 2>&1; then
        reason=$({ grep -E '^(ERROR|error):' "$log" || grep -v '^\s*$' "$log" | tail -n1; } | head -n1)
        if [ "${CI:-}" = true ]; then
            echo "error: venv $name could not be built: ${reason:-pip failed}" >&2
            exit 3
        fi
        echo "warning: venv $name skipped: could not be built: ${reason:-pip failed}" >&2
        continue
    fi
    install -m 0644 /dev/null "$venv/nvdocker2-test-hooks"  # the test suite's switch
    versions=$("$venv/bin/python" -c 'import importlib.metadata as m
print(" ".join(f"{d} {m.version(d)}" for d in ("typer", "rich", "jsonschema", "filelock", "packaging")))')
    echo "venv $name: $versions (built in $((SECONDS - start)) s)"
    # pytest from the venv's bin (not `python -m`), so the installed package is the one tested.
    # The Ansible module's tests run it under the Ansible venv's own Python, not this one.
    # In two shares side by side (scripts/pytest-shares.sh): the two CPUs of CI.
    if ! (cd tests && ../scripts/pytest-shares.sh "$jobs" "$venv/bin/pytest" -q \
            -p no:cacheprovider -o addopts= --ignore=unit/test_ansible_module.py unit "$@"); then
        failed+=("$name")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "error: tests failed in venv ${failed[*]}" >&2
    exit 1
fi
