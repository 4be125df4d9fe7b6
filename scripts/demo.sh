#!/usr/bin/env bash
# Demo of the daemon.json engine on a sample file in a temp dir (dockerd is not touched:
# --reload none --no-verify): dry run, install, install again (unchanged), status, backups,
# uninstall (byte-identical to the original), rollback.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null

work=$(mktemp -d /tmp/nvdocker2-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
export NVDOCKER2_STATE_DIR="$work/state"
cfg="$work/etc/docker/daemon.json"
mkdir -p "$(dirname "$cfg")"
nv() { echo "+ nvdocker2 $*" >&2; .venv/bin/nvdocker2 "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

printf '{\n  "log-driver": "json-file",\n  "log-opts": {"max-size": "10m", "max-file": "3"},\n  "labels": ["site=Zürich"],\n  "max-concurrent-downloads": 12345678901234567890\n}\n' >"$cfg"
cp "$cfg" "$work/original.json"

step "the operator's daemon.json (2-space indent, hand-formatted objects, non-ASCII, a big integer)"
cat "$cfg"

step "dry run: the diff, nothing touched"
nv install --config "$cfg" --runtime-path /usr/bin/nvidia-container-runtime --reload none --no-verify --dry-run
cmp -s "$cfg" "$work/original.json" && echo "(file unchanged)"

step "install"
nv install --config "$cfg" --runtime-path /usr/bin/nvidia-container-runtime --reload none --no-verify
cat "$cfg"

step "install again: idempotent, nothing written"
nv install --config "$cfg" --runtime-path /usr/bin/nvidia-container-runtime --reload none --no-verify

step "status and backups"
nv status --config "$cfg"
nv backups --config "$cfg"

step "install --json, as a package script calls it"
nv install --config "$cfg" --runtime-path /usr/bin/nvidia-container-runtime --set-default --reload none --no-verify --json

step "uninstall: back to the original bytes"
nv uninstall --config "$cfg" --reload none --no-verify
cmp "$cfg" "$work/original.json" && echo "(byte-identical to the original)"

step "rollback: undo the uninstall from its backup"
nv rollback --config "$cfg" --reload none --no-verify
cat "$cfg"

step "a broken file is refused, exit 2, file untouched"
printf '{\n  "debug": true,\n}\n' >"$cfg"
set +e
nv install --config "$cfg" --runtime-path /usr/bin/nvidia-container-runtime --reload none --no-verify
rc=$?
set -e
echo "exit code: $rc"
[ "$rc" -eq 2 ]

printf '\ndemo OK\n'
