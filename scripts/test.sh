#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (as root): installs what the tests need,
# then, without arguments, runs
#   1. `make check`: ruff, mypy (their settings are in pyproject.toml) and tests/unit without
#      the tests marked slow, every one of them run even past a failure (CHECK_STOP=),
#   2. `ansible-test sanity` on the Ansible collection (its fleet tests run in step 5),
#   3. the unit and CLI suites in pip venvs with the newest and the oldest supported libraries
#      (scripts/test-venvs.sh),
#   4. the platform matrix (`make matrix`: the .deb on Debian 12, 13 and sid trees, each on
#      its own dockerd),
#   5. pytest on Debian's libraries, last, so its closing line ends the output: the rest of
#      tests/ (tests/unit's slow tests, not those step 1 ran).
# Every step runs even when an earlier one failed; the exit status is non-zero if any failed.
# Extra arguments go to pytest (step 5), which then runs what they name, and skip steps 3 and 4
# unless NVDOCKER2_VENVS=1 or NVDOCKER2_MATRIX=1 (=0 always skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh tests
failed=()
make --no-print-directory check CHECK_STOP= || failed+=("make check (ruff, mypy, unit tests)")
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
rest=("$@")
[ "$#" -gt 0 ] || rest=(-m "not unit or slow")  # step 1 ran the others
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/platforms "${rest[@]}" \
    || status=$?
if [ "${#failed[@]}" -gt 0 ]; then
    echo "error: failed before the main pytest run: ${failed[*]}" >&2
    exit 1
fi
exit "$status"
