#!/usr/bin/env bash
# Prepare a Debian 12 machine (as root) for the demo and the tests: the Debian packages they
# need, then a virtual environment in .venv on Debian's own python3 and python3-* libraries
# (the versions the .deb depends on), with nvdocker2 installed editable into it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    docker.io runc containerd busybox-static iproute2 make git
    python3 python3-venv python3-pip python3-setuptools
    python3-typer python3-rich python3-jsonschema python3-filelock python3-packaging python3-tomli python3-tomlkit
    python3-pytest python3-hypothesis
    dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all rpm lintian equivs devscripts
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing Debian packages: ${missing[*]}" >&2
        echo "hint: run this script as root, or: apt-get install ${missing[*]}" >&2
        exit 3
    fi
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    export NEEDRESTART_SUSPEND=1
    log=$(mktemp)
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "error: apt-get could not install: ${missing[*]}" >&2
        exit 3
    fi
    rm -f "$log"
fi

if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
# --no-deps: the dependencies are Debian's python3-* packages, seen through system site-packages.
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | grep -v "^$" || true
# vermin (not in Debian) checks statically that the code needs nothing newer than Python 3.9.
.venv/bin/python -c "import vermin" 2>/dev/null || .venv/bin/python -m pip install -q "vermin==1.9.2"
.venv/bin/python -c "import nvdocker2, typer, rich, jsonschema, filelock, packaging, vermin"
