#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (as root): installs what the tests need,
# then, without arguments, runs
#   1. `make check`: ruff and mypy (their settings are in pyproject.toml), then tests/unit
#      without the tests marked slow, in two shares side by side, each stopping at its first
#      failure,
#   2. `ansible-test sanity` on the Ansible collection (its fleet tests run in step 5),
#   3. the unit and CLI suites in pip venvs with the newest and the oldest supported libraries
#      (scripts/test-venvs.sh),
#   4. the platform matrix (`make matrix`: the .deb on Debian 12, 13 and sid trees, each on
#      its own dockerd),
#   5. the mutation guard (`make mutation-changed`: the modules of tests/mutation/modules.toml
#      changed since the last release tag, mutated with their listed tests; below 95 % fails),
#   6. pytest on Debian's libraries, last, so its closing line ends the output; without
#      arguments it leaves out the unit tests step 1 passed (when step 1 failed, it runs them all).
# Every step runs even when an earlier one failed; the exit status is non-zero if any failed.
# Extra arguments go to pytest (step 6), which then runs what they name, and skip steps 3, 4
# and 5 unless NVDOCKER2_VENVS=1, NVDOCKER2_MATRIX=1 or NVDOCKER2_MUTATION=1 (=0 always skips
# them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh tests
failed=()
checked=()
if make --no-print-directory check; then
    checked=(-m "not unit or slow")  # the unit tests not marked slow have passed
else
    failed+=("make check (ruff, mypy, unit tests)")
fi
scripts/ansible-test.sh sanity || failed+=("ansible-test sanity")
wanted() {  # wanted VAR ARGC: run a step by default only when pytest got no arguments
    [ "${!1:-}" = 1 ] || { [ "$2" -eq 0 ] && [ "${!1:-}" != 0 ]; }
}
if wanted NVDOCKER2_VENVS $#; then
    scripts/test-venvs.sh || failed+=("pip venvs")
fi
if wanted NVDOCKER2_MATRIX $#; then
    make --no-print-directory matrix || failed+=("platform matrix")
fi
if wanted NVDOCKER2_MUTATION $#; then
    make --no-print-directory mutation-changed || failed+=("mutation guard")
fi
status=0
[ $# -eq 0 ] || checked=()
.venv/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/platforms "${checked[@]}" "$@" \
    || status=$?
if [ "${#failed[@]}" -gt 0 ]; then
    echo "error: failed before the main pytest run: ${failed[*]}" >&2
    exit 1
fi
exit "$status"
