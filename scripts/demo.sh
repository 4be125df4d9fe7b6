#!/usr/bin/env bash
# The demo, from a fresh Debian 12 machine (as root): installs what the demo needs (a private
# dockerd's packages and nvdocker2's libraries, into .venv), then runs nvdocker2's main job on
# a private dockerd (see scripts/demo.py). The host's Docker is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: setting up what the demo needs (scripts/setup.sh demo; the first run installs Debian packages)"
scripts/setup.sh demo
exec .venv/bin/python scripts/demo.py
