#!/usr/bin/env bash
# scripts/pinned-venv.sh DIR PACKAGE VERSION: a virtual environment DIR on Debian's python3 with
# PACKAGE==VERSION from PyPI (a tool the tests run, kept apart from .venv's libraries); made
# again only when DIR lacks that version. pip's output is shown only when it fails: a test run
# shows results, not downloads.
set -euo pipefail
dir=$1 package=$2 version=$3
if [ "$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('$package'))" 2>/dev/null)" != "$version" ]; then
    echo "$package $version into $dir"
    rm -rf "$dir"
    /usr/bin/python3 -m venv "$dir"
    if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check "$package==$version" \
            > "$dir/pip.log" 2>&1; then
        cat "$dir/pip.log" >&2
        echo "error: pip could not install $package $version into $dir" >&2
        exit 1
    fi
fi
