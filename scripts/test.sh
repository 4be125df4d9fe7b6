#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (as root): installs what the tests need,
# runs the unit and CLI suites in pip venvs with the newest and the oldest supported libraries
# (scripts/test-venvs.sh), then pytest on Debian's libraries. Extra arguments go to pytest;
# with them the venvs are skipped unless NVDOCKER2_VENVS=1 (NVDOCKER2_VENVS=0 always skips).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh tests
scripts/ansible-test.sh sanity  # the Ansible collection; its fleet tests run in pytest below
if [ "${NVDOCKER2_VENVS:-}" = 1 ] || { [ $# -eq 0 ] && [ "${NVDOCKER2_VENVS:-}" != 0 ]; }; then
    scripts/test-venvs.sh
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
