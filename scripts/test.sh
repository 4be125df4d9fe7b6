#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (as root): installs what the tests need,
# then runs pytest, then (without arguments) the platform matrix (`make matrix`: the .deb on
# Debian 12, 13 and sid trees, each on its own dockerd). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh tests
scripts/ansible-test.sh sanity  # the Ansible collection; its fleet tests run in pytest below
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/platforms "$@" || status=$?
if [ $# -eq 0 ]; then
    make --no-print-directory matrix || status=1
fi
exit "$status"
