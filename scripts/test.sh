#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (as root): installs what the tests need,
# then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh tests
scripts/ansible-test.sh sanity  # the Ansible collection; its fleet tests run in pytest below
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
