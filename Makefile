# Project tasks.
#   make check  the quick check before a commit: `make lint`, then tests/unit without the tests
#               marked slow in CHECK_JOBS (2) shares side by side, each stopping at its first
#               failure (docs/testing.md); scripts/test.sh runs it first
#   make lint   ruff on the tree, mypy --strict on nvdocker2/host, nvdocker2/store and
#               nvdocker2/engines (the settings in pyproject.toml; scripts/setup.sh tests
#               installs both)
#   make deb    dist/nvdocker2_VERSION_all.deb   (dpkg-buildpackage, debian/)
#   make rpm    dist/nvdocker2-VERSION-1.noarch.rpm (rpmbuild, rpm/nvdocker2.spec)
#   make ansible-test  ansible-test sanity on the collection nvdocker2.gpu, then its fleet tests
#                      (scripts/ansible-test.sh: pinned ansible-core in .venv-ansible)
#   make agent-image  dist/nvdocker2-agent_VERSION.tar, the agent's image as a rootfs (the .deb on
#               the cached Debian 12 tree; deploy/image/build.sh), `docker import`-ed as
#               nvdocker2-agent:VERSION (IMPORT=0 skips the import)
#   make clean
#   make bench  bench/RESULTS.md (bench/run.py; bench/Makefile.fragment)
#   make mutation  mutation testing of the modules in tests/mutation/modules.toml (a release
#               check; docs/testing.md)
#   make mutation-changed  the same for what changed since the last v* tag, within 9 minutes
#               (scripts/test.sh runs it)
#   make crio-e2e CRIO=PATH [PINNS=PATH]  the release check against a real CRI-O: a private crio
#               (PATH: one built from CRI-O's source; its pinns beside it unless PINNS names
#               one) configured by nvdocker2 (tests/release/crio_e2e.py, docs/testing.md)
#   make cri-crosscheck CRICTL=PATH  the tests' CRI client held against crictl on the private
#               containerds (tests/release/crictl_crosscheck.py, docs/testing.md)
#   make matrix the platform matrix: the .deb on Debian 12, 13 and sid trees, each on its own
#               dockerd (scripts/matrix.py; MATRIX_PLATFORMS="bookworm sid" picks, MATRIX_JOBS=N)
# Packages are built from a copy of the working tree (tracked and new files, not ignored ones)
# in a temporary directory, so the checkout stays clean. On Debian 12 a missing build tool or
# build dependency is installed first (as root). The version comes from nvdocker2/__init__.py;
# DEB_VERSION=… / RPM_VERSION=… build another one (the upgrade tests use that).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:

VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' nvdocker2/__init__.py)
DEB_VERSION ?= $(VERSION)
RPM_VERSION ?= $(DEB_VERSION)
DIST ?= $(CURDIR)/dist
# rpmbuild cannot see Debian's python3-* packages in its own database.
RPMBUILD_FLAGS ?= $(if $(wildcard /usr/bin/dpkg),--nodeps)
# Build with the distribution's python3, not one from a version manager earlier on PATH.
SYSTEM_PATH := /usr/sbin:/usr/bin:/sbin:/bin
# What rpm/nvdocker2.spec needs to build on Debian 12 (rpmbuild, pip, and the libraries the
# man page generator imports).
RPM_DEBIAN_DEPS := rpm python3-pip python3-setuptools python3-typer python3-rich \
    python3-jsonschema python3-filelock python3-packaging python3-tomlkit python3-yaml
RPM_PYTHON_CHECK := import setuptools, pip, typer, rich, jsonschema, filelock, packaging, \
    tomlkit, yaml
# apt-get and its options, without the command: mk-build-deps --tool runs it as one program
# (split into words, no shell, so no VAR=value in front) followed by `-f install`. The recipes
# that install export DEBIAN_FRONTEND=noninteractive instead.
APT_GET := apt-get -y -q --no-install-recommends

.PHONY: deb rpm clean deb-build-deps rpm-build-deps matrix agent-image

# $(call source_tree,DIR,VERSION): copy the working tree to DIR, with VERSION in __init__.py.
define source_tree
mkdir -p "$(1)"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard \
        | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$(1)" -xf -
else
    tar --exclude=./.git --exclude=./.venv --exclude=./dist --exclude=./build -cf - . \
        | tar -C "$(1)" -xf -
fi
sed -i 's/^__version__ = .*/__version__ = "$(2)"/' "$(1)/nvdocker2/__init__.py"
endef

deb: deb-build-deps
	@newest=$$(dpkg-parsechangelog -l debian/changelog -S Version)
	if [ "$(DEB_VERSION)" = "$(VERSION)" ] && [ "$$newest" != "$(VERSION)" ]; then
	    echo "error: debian/changelog's newest entry is $$newest, nvdocker2/__init__.py says $(VERSION)" >&2
	    echo "hint: add a debian/changelog entry for $(VERSION) (dch -v $(VERSION))" >&2
	    exit 2
	fi
	tmp=$$(mktemp -d /tmp/nvdocker2-deb.XXXXXX)
	trap 'rm -rf "$$tmp"' EXIT
	src="$$tmp/nvdocker2-$(DEB_VERSION)"
	$(call source_tree,$$src,$(DEB_VERSION))
	cd "$$src"
	if [ "$$newest" != "$(DEB_VERSION)" ]; then
	    { printf 'nvdocker2 (%s) unstable; urgency=medium\n\n  * Build of version %s.\n\n' \
	          "$(DEB_VERSION)" "$(DEB_VERSION)"
	      printf ' -- %s  %s\n\n' "$$(dpkg-parsechangelog -S Maintainer)" "$$(date -R)"
	      cat debian/changelog; } > debian/changelog.new
	    mv debian/changelog.new debian/changelog
	fi
	PATH="$(SYSTEM_PATH):$$PATH" dpkg-buildpackage -b -us -uc > "$$tmp/build.log" 2>&1 || { cat "$$tmp/build.log"; exit 1; }
	mkdir -p "$(DIST)"
	cp "$$tmp/nvdocker2_$(DEB_VERSION)_all.deb" "$(DIST)/"
	echo "$(DIST)/nvdocker2_$(DEB_VERSION)_all.deb"

deb-build-deps:
	@if command -v dpkg-buildpackage >/dev/null && dpkg-checkbuilddeps debian/control 2>/dev/null; then
	    exit 0
	fi
	if [ "$$(id -u)" -ne 0 ]; then
	    dpkg-checkbuilddeps debian/control || true
	    echo "error: build dependencies of the .deb are missing" >&2
	    echo "hint: run make deb as root to install them, or: mk-build-deps -ir debian/control" >&2
	    exit 3
	fi
	export DEBIAN_FRONTEND=noninteractive
	command -v mk-build-deps >/dev/null && command -v equivs-build >/dev/null \
	    || $(APT_GET) install dpkg-dev devscripts equivs
	tmp=$$(mktemp -d /tmp/nvdocker2-builddeps.XXXXXX)
	trap 'rm -rf "$$tmp"' EXIT
	cp debian/control "$$tmp/control"
	cd "$$tmp"
	mk-build-deps --install --remove --tool "$(APT_GET)" control

rpm: rpm-build-deps
	@tmp=$$(mktemp -d /tmp/nvdocker2-rpm.XXXXXX)
	trap 'rm -rf "$$tmp"' EXIT
	$(call source_tree,$$tmp/nvdocker2-$(RPM_VERSION),$(RPM_VERSION))
	mkdir -p "$$tmp/rpmbuild/SOURCES"
	tar -C "$$tmp" -czf "$$tmp/rpmbuild/SOURCES/nvdocker2-$(RPM_VERSION).tar.gz" nvdocker2-$(RPM_VERSION)
	PATH="$(SYSTEM_PATH):$$PATH" rpmbuild -bb $(RPMBUILD_FLAGS) --define "_topdir $$tmp/rpmbuild" \
	    --define "version $(RPM_VERSION)" rpm/nvdocker2.spec > "$$tmp/build.log" 2>&1 \
	    || { cat "$$tmp/build.log"; exit 1; }
	mkdir -p "$(DIST)"
	cp "$$tmp"/rpmbuild/RPMS/noarch/nvdocker2-$(RPM_VERSION)-*.noarch.rpm "$(DIST)/"
	ls "$(DIST)"/nvdocker2-$(RPM_VERSION)-*.noarch.rpm

rpm-build-deps:
	@if command -v rpmbuild >/dev/null && /usr/bin/python3 -c "$(RPM_PYTHON_CHECK)" 2>/dev/null; then
	    exit 0
	fi
	if [ "$$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	    echo "error: rpmbuild, or python3 with pip, setuptools and nvdocker2's libraries, is missing" >&2
	    echo "hint: Debian: apt-get install $(RPM_DEBIAN_DEPS); Fedora: dnf builddep rpm/nvdocker2.spec" >&2
	    exit 3
	fi
	export DEBIAN_FRONTEND=noninteractive
	$(APT_GET) install $(RPM_DEBIAN_DEPS)

clean:
	@rm -rf dist build *.egg-info

.PHONY: ansible-test
ansible-test:
	scripts/setup.sh
	scripts/ansible-test.sh

MATRIX_PLATFORMS ?=
MATRIX_PYTHON := $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)

# ruff is in .venv; mypy has its own venv, so that the libraries it brings stay out of .venv.
.PHONY: lint check
lint:
	@if [ ! -x .venv/bin/ruff ] || [ ! -x .venv-mypy/bin/mypy ]; then
	    echo "error: ruff (.venv) or mypy (.venv-mypy) is not installed" >&2
	    echo "hint: run scripts/setup.sh tests" >&2
	    exit 3
	fi
	status=0
	.venv/bin/ruff check --quiet . || status=1
	.venv-mypy/bin/mypy || status=1
	exit $$status

# The unit tests in CHECK_JOBS shares side by side (scripts/pytest-shares.sh); CHECK_STOP= runs
# every test past a failure (scripts/test.sh).
CHECK_JOBS ?= 2
CHECK_STOP ?= -x
check: lint
	@scripts/pytest-shares.sh $(CHECK_JOBS) .venv/bin/python -m pytest tests/unit -q $(CHECK_STOP) \
	    -p no:cacheprovider -m "not slow"

matrix:
	@$(MATRIX_PYTHON) scripts/matrix.py $(MATRIX_PLATFORMS)

include bench/Makefile.fragment

agent-image: deb
	@IMPORT=$${IMPORT:-1} deploy/image/build.sh "$(DIST)/nvdocker2_$(DEB_VERSION)_all.deb"

# make mutation: mutation testing of the modules in tests/mutation/modules.toml (a release
# check, docs/testing.md); MUTATION_MODULES="device_ids hook/request" picks, MUTATION_JOBS=N.
MUTATION_MODULES ?=
.PHONY: mutation
mutation:
	@$(MATRIX_PYTHON) scripts/mutation.py $(MUTATION_MODULES)

# make mutation-changed: the quick guard scripts/test.sh runs: the listed modules changed since
# the newest v* tag (MUTATION_SINCE=TAG picks another), only the functions the change touched,
# within a time budget (MUTATION_BUDGET seconds, default 540); below 95 % fails.
MUTATION_SINCE ?=
MUTATION_BUDGET ?= 540
.PHONY: mutation-changed
mutation-changed:
	@$(MATRIX_PYTHON) scripts/mutation.py --changed-since $(MUTATION_SINCE) --budget $(MUTATION_BUDGET)

# make crio-e2e CRIO=PATH [PINNS=PATH]: tests/release/crio_e2e.py against that crio (a release
# check: no CRI-O package is in the archives this project is tested from).
CRIO ?=
PINNS ?=
.PHONY: crio-e2e
crio-e2e:
	@if [ -z "$(CRIO)" ]; then
	    echo "error: make crio-e2e needs CRIO=PATH, the crio to test against" >&2
	    echo "hint: make crio-e2e CRIO=/path/to/crio [PINNS=/path/to/pinns] (docs/testing.md)" >&2
	    exit 2
	fi
	NVD2_CRIO="$(abspath $(CRIO))" NVD2_PINNS="$(if $(PINNS),$(abspath $(PINNS)))" \
	    $(MATRIX_PYTHON) -m pytest -q -p no:cacheprovider tests/release/crio_e2e.py

# make cri-crosscheck CRICTL=PATH: tests/release/crictl_crosscheck.py (crictl, like CRI-O, is in
# no archive this project is tested from).
CRICTL ?=
.PHONY: cri-crosscheck
cri-crosscheck:
	@if [ -z "$(CRICTL)" ]; then
	    echo "error: make cri-crosscheck needs CRICTL=PATH, the crictl to check against" >&2
	    echo "hint: make cri-crosscheck CRICTL=/path/to/crictl (docs/testing.md)" >&2
	    exit 2
	fi
	NVD2_CRICTL="$(abspath $(CRICTL))" \
	    $(MATRIX_PYTHON) -m pytest -q -p no:cacheprovider tests/release/crictl_crosscheck.py
