#!/usr/bin/env bash
# The demo, from a fresh Debian 12 machine (as root): sets up .venv and the Debian packages,
# then runs nvdocker2's main job on a private dockerd (see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/demo.py
