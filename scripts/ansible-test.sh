#!/usr/bin/env bash
# `make ansible-test`: the Ansible collection nvdocker2.gpu (docs/reference.md §10).
#   1. .venv-ansible: a virtual environment with the pinned ansible-core from PyPI (pip's
#      downloads cached in $NVDOCKER2_TEST_CACHE/pip), or the ansible-core in
#      $NVDOCKER2_ANSIBLE_BIN (e.g. /usr/bin for Debian 12's ansible-core 2.14).
#   2. `ansible-test sanity` on the collection. ansible-test bootstraps pip into each sanity
#      virtual environment with a get-pip script it downloads from its own CI file server;
#      here that script is provided, offline, from PyPI's pip wheel (get-pip.py does the same
#      thing: pip runs from its wheel and installs itself). Its requirements come from PyPI.
#   3. The fleet tests: real ansible-playbook on five hosts with private dockerds
#      (tests/e2e/test_ansible_fleet.py).
# `scripts/ansible-test.sh sanity` does 1 and 2 only (scripts/test.sh, whose pytest run holds 3);
# `scripts/ansible-test.sh venv` does 1 only (scripts/setup.sh tests: the unit tests of the
# Ansible module run in that venv's Python, in `make check`).
# Other arguments go to pytest. As root on Debian 12 (scripts/setup.sh prepares the machine).
set -euo pipefail
cd "$(dirname "$0")/.."

ANSIBLE_CORE_VERSION="${ANSIBLE_CORE_VERSION:-2.19.14}"
CACHE="${NVDOCKER2_TEST_CACHE:-/var/cache/nvdocker2-tests}"
export PIP_CACHE_DIR="$CACHE/pip"

if [ -z "${NVDOCKER2_ANSIBLE_BIN:-}" ]; then
    scripts/pinned-venv.sh .venv-ansible ansible-core "$ANSIBLE_CORE_VERSION"
    NVDOCKER2_ANSIBLE_BIN="$PWD/.venv-ansible/bin"
fi
export NVDOCKER2_ANSIBLE_BIN
bin="$NVDOCKER2_ANSIBLE_BIN"
[ "${1:-}" = "venv" ] && exit 0

# ansible-test keeps its caches under $HOME/.ansible: give it its own home. Its pip runs (the
# requirements of each sanity test) read that home's pip.conf: quiet, so the output shows the
# tests and not each download (errors and warnings still show).
export HOME="$CACHE/ansible-test-home"
mkdir -p "$HOME/.config/pip"
printf '[global]\nquiet = 1\ndisable-pip-version-check = true\n' > "$HOME/.config/pip/pip.conf"
pip_version=$("$bin/python3" - <<'PY' 2>/dev/null || true
from ansible_test._internal.python_requirements import get_venv_packages
class P: version = "3"
print(get_venv_packages(P())["pip"])
PY
)
pip_version="${pip_version:-24.2}"
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -f "$get_pip" ]; then
    wheels="$CACHE/pip-wheels"
    mkdir -p "$wheels" "$(dirname "$get_pip")"
    wheel=$(ls "$wheels"/pip-"$pip_version"-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$wheel" ]; then
        /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps \
            --only-binary=:all: -d "$wheels" "pip==$pip_version"
        wheel=$(ls "$wheels"/pip-"$pip_version"-*.whl | head -n1)
    fi
    cat > "$get_pip" <<PY
# get-pip for ansible-test, made by scripts/ansible-test.sh from PyPI's $(basename "$wheel"):
# like get-pip.py, run pip from its wheel to install the packages asked for (pip itself).
import sys
sys.path.insert(0, "$wheel")
from pip._internal.cli.main import main
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--upgrade", "--force-reinstall"] + args))
PY
fi

echo "ansible-test: sanity on the collection nvdocker2.gpu ($("$bin/ansible" --version | sed -n 1p))"
py=$("$bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
(cd ansible/ansible_collections/nvdocker2/gpu && "$bin/ansible-test" sanity --venv --python "$py" --color no)

[ "${1:-}" = "sanity" ] && exit 0
echo "ansible-test: the fleet tests"
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests/e2e/test_ansible_fleet.py "$@"
