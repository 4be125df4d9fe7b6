#!/usr/bin/env bash
# Prepare a Debian 12 machine (as root) for the demo or the tests:
#   scripts/setup.sh demo    what scripts/demo.sh needs: a private dockerd and nvdocker2
#   scripts/setup.sh tests   (the default) that, plus pytest, hypothesis, the .deb/.rpm tools
# The Debian packages first (each group printed with why, one line per package as apt sets it
# up), then a virtual environment in .venv on Debian's own python3 and python3-* libraries (the
# versions the .deb depends on), with nvdocker2 installed editable into it.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-tests}
KUBERNETES_VALIDATE_VERSION=1.37.0
RUFF_VERSION=0.17.6
MYPY_VERSION=1.19.1  # the newest that checks for Python 3.9
case "$profile" in
    demo | tests) ;;
    *)
        echo "error: unknown setup profile '$profile'" >&2
        echo "hint: scripts/setup.sh demo (what the demo needs) or scripts/setup.sh tests (everything)" >&2
        exit 2
        ;;
esac

# "why: packages" groups; the demo takes the first three, the tests all of them.
groups=(
    "a private dockerd and a tiny busybox image to run containers in: docker.io containerd runc busybox-static iproute2"
    "the virtual environment nvdocker2 is installed into: python3 python3-venv python3-pip python3-setuptools"
    "nvdocker2's libraries, at the versions the .deb depends on: python3-typer python3-rich python3-jsonschema python3-filelock python3-packaging python3-tomli python3-tomlkit python3-yaml"
)
if [ "$profile" = tests ]; then
    groups+=(
        "the test runner and its property-based tests: python3-pytest python3-hypothesis"
        "building and checking the .deb and the .rpm (tests/packaging): dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all rpm lintian equivs devscripts make git"
        "a private Podman, rootful and rootless, that reads CDI specs (tests/e2e/test_cdi_podman_e2e.py, test_podman_devices_e2e.py, test_podman_rootless_e2e.py) and a rootless dockerd (test_docker_rootless_e2e.py): podman uidmap rootlesskit slirp4netns"
        "the tests' own CRI client, the calls the kubelet makes (tests/e2e/cri.py): python3-grpcio"
        "an unprivileged LXC container whose mount hook (liblxc-common's hooks/nvidia) runs our nvidia-container-cli (tests/e2e/test_lxc_e2e.py): lxc"
    )
fi

start=$SECONDS
missing=()
for group in "${groups[@]}"; do
    why=${group%%: *}
    wanted=()
    read -r -a wanted <<<"${group#*: }"
    lacking=()
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || lacking+=("$p")
    done
    if [ "${#lacking[@]}" -gt 0 ]; then
        echo "setup: to install, for $why: ${lacking[*]}"
        missing+=("${lacking[@]}")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing Debian packages: ${missing[*]}" >&2
        echo "hint: run this script as root, or: apt-get install ${missing[*]}" >&2
        exit 3
    fi
    export DEBIAN_FRONTEND=noninteractive
    export NEEDRESTART_SUSPEND=1
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    # apt's own lines go to $log; a person sees one line per package downloaded and set up.
    progress() {
        awk '/^Get:[0-9]+ /  { n++; printf "  downloaded %d: %s %s %s\n", n, $(NF-4), $(NF-1), $NF; fflush() }
             /^Setting up / { printf "  set up %s\n", $3; fflush() }'
    }
    echo "setup: apt-get update (the package lists)"
    if ! apt-get -o DPkg::Lock::Timeout=900 update -q >"$log" 2>&1; then
        cat "$log" >&2
        echo "error: apt-get update failed" >&2
        echo "hint: check the network and /etc/apt/sources.list, then run this again" >&2
        exit 3
    fi
    echo "setup: apt-get install ${#missing[@]} packages and what they depend on (the first time takes a minute or so)"
    if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" 2>&1 \
            | tee -a "$log" | progress; then
        cat "$log" >&2
        echo "error: apt-get could not install: ${missing[*]}" >&2
        echo "hint: see apt's output above; fix it and run this again" >&2
        exit 3
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv (Debian's python3, seeing the python3-* libraries above)"
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
# --no-deps: the dependencies are Debian's python3-* packages, seen through system site-packages.
echo "setup: installing nvdocker2 into .venv (pip install -e .)"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | grep -v "^$" || true
modules="nvdocker2, typer, rich, jsonschema, filelock, packaging"
if [ "$profile" = tests ]; then
    # vermin (not in Debian) checks statically that the code needs nothing newer than Python 3.9.
    if ! .venv/bin/python -c "import vermin" 2>/dev/null; then
        echo "setup: installing vermin into .venv (checks that the code runs on Python 3.9)"
        .venv/bin/python -m pip install -q "vermin==1.9.2"
    fi
    modules="$modules, pytest, hypothesis, vermin, yaml"
    # ruff (not in Debian 12) lints the tree: `make lint`. One file, no libraries, so in .venv.
    if [ "$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('ruff'))" \
            2>/dev/null)" != "$RUFF_VERSION" ]; then
        echo "setup: installing ruff $RUFF_VERSION into .venv (make lint)"
        .venv/bin/python -m pip install -q "ruff==$RUFF_VERSION"
    fi
    # mypy (Debian 12's is 1.0) type-checks host/, store/ and engines/: `make lint`. Its own
    # venv: the typing_extensions it brings would change what typer and rich import in .venv.
    scripts/pinned-venv.sh .venv-mypy mypy "$MYPY_VERSION"
    # kubernetes-validate (not in Debian) checks deploy/ against the Kubernetes API schemas; its
    # own venv, so its newer jsonschema never replaces the one the .deb depends on.
    scripts/pinned-venv.sh .venv-kubernetes kubernetes-validate "$KUBERNETES_VALIDATE_VERSION"
    # ansible-core in .venv-ansible: the Ansible module's unit tests run in its Python.
    scripts/ansible-test.sh venv
    # The test suite's switch (nvdocker2/host/testing.py): test hooks are read only in a venv
    # that holds this root-made file; no packaged install ever has it.
    install -m 0644 /dev/null .venv/nvdocker2-test-hooks
fi
.venv/bin/python -c "import $modules"
echo "setup: ready for the $profile ($((SECONDS - start)) s)"
