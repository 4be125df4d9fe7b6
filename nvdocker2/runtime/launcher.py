"""Fast launchers for the runtime and the hook, for packages (and the benchmarks).

containerd-shim runs the runtime for every step of every container, and a console script
pays for the interpreter's `site` set-up (every .pth file of the system) before our code runs.
These launchers cut that cost:

- `nvidia-container-runtime` is a POSIX sh script. When no argument is `create`, the first
  is not `direct-hook` (direct mode's hook role, docs/reference.md §7), and
  config.toml does not set `runtimes` or `debug` (or `create` marked the bundle, the current
  directory, as created under such a config), it execs the first of docker-runc, runc,
  crun on PATH itself (as nvdocker2.runtime would), so state/start/kill/delete start no
  Python at all. Otherwise it runs `python3 -I -S` with nvdocker2.runtime.
- `nvidia-container-runtime-hook` is a Python script run with `-I -S`: no site, no PYTHON*
  variables from dockerd's environment (under `--gpus`), the package directory put on
  sys.path explicitly.

`python3 -m nvdocker2.runtime.launcher DEST [--python PY]` writes both into DEST.

- `nvidia-container-cli` (our own, nvdocker2.nvc) is a POSIX sh script too: the hook runs it
  as root on every GPU container's start, LXC's mount hook from PATH with lxc-start's whole
  environment. It runs `python3 -I -S` with nvdocker2.nvc when it and the interpreter pass
  the door's rules. It is never written beside the other two (`--cli DIR`, the packages'
  /usr/libexec/nvdocker2): /usr/bin/nvidia-container-cli is libnvidia-container-tools'.

A pip install gets the same two launchers (`render_pip`, kept in the source tree as
nvdocker2/runtime/bin/ and installed by pip as scripts beside `nvdocker2`). What a package
knows when it is built, they find out when Python is needed (never on the sh fast path): the
interpreter from the first line of the `nvdocker2` console script pip wrote beside them (the
one pip installed nvdocker2 for), the package directory as PREFIX/lib/pythonX.Y/site-packages
(or Debian's dist-packages) of the directory above theirs, else Python's own `site` set-up.
`python3 -m nvdocker2.runtime.launcher --pip DEST` writes those.
"""

from __future__ import annotations

import os
import shlex
import sys

from nvdocker2.host.files import write_new

# The door's rules (nvdocker2.host.run.unsafe_to_run) in sh, for what the launchers exec: a
# stat of the path's directories (one fork, a readlink more for each symlink on the way).
DOOR = r"""# The door's rules (nvdocker2.host.run.unsafe_to_run) in sh: `trusted PATH` succeeds when
# PATH is absolute and it, every directory on the way and every symlink, followed, belong to
# root (or this user) and are writable by no one else (in a sticky directory, an entry of a
# trusted owner), the path it ended at (links followed) in $real; else it fails, the reason in
# $why. stat and readlink answer, taken from /usr/bin or /bin as /bin/sh is.
nl='
'
ws=$IFS
euid=
for stat in /usr/bin/stat /bin/stat ''; do [ -x "$stat" ] && break; done
for readlink in /usr/bin/readlink /bin/readlink ''; do [ -x "$readlink" ] && break; done
for dd in /usr/bin/dd /bin/dd ''; do [ -x "$dd" ] && break; done
for cat in /usr/bin/cat /bin/cat ''; do [ -x "$cat" ] && break; done
maps() {  # maps FILE OUTSIDE INSIDE: $hit=1 where a range of FILE covers host id OUTSIDE, or
    # (INSIDE >= 0) this namespace's id INSIDE; a map that cannot be read covers everything
    hit=
    [ -r "$1" ] || { hit=1; return 0; }
    while read -r a b c; do
        if [ "$b" -le "$2" ] && [ "$2" -lt $((b + c)) ]; then hit=1; fi
        if [ "$3" -ge 0 ] && [ "$a" -le "$3" ] && [ "$3" -lt $((a + c)) ]; then hit=1; fi
    done < "$1"
}
ids() {  # this user, and a user namespace's overflow ids where it maps neither root nor them
    # (host/run.py's trusted_ids; where a file shows an overflow id that is mapped, the Python
    # door decides)
    [ -n "$euid" ] && return 0
    euid=-1 ouid=-1 ogid=-1 shared=-1 fowner=0
    if [ -r /proc/self/status ]; then
        while read -r key a b x; do
            case $key in
                Uid:) euid=$b ;;
                CapEff:) case $a in *[!0-9a-fA-F]*|'') ;; *) fowner=$((0x$a >> 3 & 1)) ;; esac ;;
            esac
        done < /proc/self/status
    fi
    maps /proc/self/uid_map 0 -1
    [ -n "$hit" ] && return 0
    # sysctl files answer a read at an offset with nothing, and sh's read takes a byte at a time
    u=$("$cat" /proc/sys/kernel/overflowuid 2>/dev/null) \
        && g=$("$cat" /proc/sys/kernel/overflowgid 2>/dev/null) || return 0
    case $u$g in *[!0-9]*|'') return 0 ;; esac
    maps /proc/self/uid_map 0 "$u"
    if [ -z "$hit" ]; then
        ouid=$u
    elif [ "$fowner" -eq 1 ] && [ "$u" -ne "$euid" ]; then
        shared=$u
    fi
    maps /proc/self/gid_map 0 "$g"
    [ -n "$hit" ] || ogid=$g
}
unmapped() {  # uid entry mode pmode pgid: whether `entry`, showing the overflow uid that this
    # namespace maps to one of its users, belongs to an unmapped owner (the host's root) after
    # all. A holder of CAP_FOWNER is refused an O_NOATIME open (EPERM) exactly then; a link
    # counts in a directory no one else can write.
    [ "$1" -eq "$shared" ] || return 1
    case $(($3 & 61440)) in
        40960) [ -n "$4" ] && ! others_write "$4" "$5" ;;
        32768|16384)
            [ -n "$dd" ] || return 1
            err=$(LC_ALL=C "$dd" if="$2" iflag=noatime,nofollow,nonblock count=0 status=none 2>&1) \
                && return 1
            case $err in *"Operation not permitted"*) return 0 ;; esac
            return 1 ;;
        *) return 1 ;;
    esac
}
owner_ok() {  # uid [entry mode pmode pgid]
    [ "$1" -eq 0 ] && return 0
    ids
    [ "$1" -eq "$euid" ] || [ "$1" -eq "$ouid" ] || { [ -n "${2-}" ] && unmapped "$@"; }
}
others_write() {  # mode gid: writable by everyone, or by a group other than root's
    [ $(($1 & 2)) -eq 0 ] || return 0
    [ $(($1 & 16)) -ne 0 ] && [ "$2" -ne 0 ] || return 1
    ids
    [ "$2" -ne "$ogid" ]
}
trusted() {
    why= path=$1 pending=$1 links=0
    while :; do
        case $pending in
            *"$nl"*) why="$path: a newline in the path"; return 1 ;;
            /*) ;;
            *) why="$path is not an absolute path"; return 1 ;;
        esac
        # /, then each prefix up to the first `..` (resolved once those are known not links)
        list=/ top= rest=
        IFS=/
        for part in $pending; do
            IFS=$ws
            if [ -n "$rest" ]; then rest=$rest/$part; continue; fi
            case $part in
                ''|.) ;;
                ..) rest=/.. ;;
                *) top=$top/$part; list=$list$nl$top ;;
            esac
        done
        IFS=$nl
        set -- $list
        IFS=$ws
        [ -n "$stat" ] && out=$("$stat" -c '%u %g %f' -- "$@" 2>/dev/null) || {
            why="cannot read $path (or a directory on its way)"; return 1; }
        set -- $out
        last=${top:-/} pmode= next=
        IFS=$nl
        for ent in $list; do
            IFS=$ws
            case $# in [0-2]) why="cannot read $ent"; return 1 ;; esac
            case $3 in *[!0-9a-f]*|'') why="cannot read $ent"; return 1 ;; esac
            uid=$1 gid=$2 mode=$((0x$3))
            shift 3
            if owner_ok "$uid" "$ent" "$mode" "$pmode" "$pgid"; then ours=1; else ours=; fi
            if [ -z "$pmode" ]; then
                if [ -z "$ours" ] || others_write "$mode" "$gid"; then
                    why="/ is writable by other users"; return 1
                fi
            elif others_write "$pmode" "$pgid"; then
                if [ $((pmode & 512)) -eq 0 ] || [ -z "$ours" ]; then
                    why="$parent is writable by other users"; return 1
                fi
            fi
            if [ -z "$ours" ]; then why="$ent belongs to uid $uid"; return 1; fi
            kind=$((mode & 61440))
            if [ "$kind" -eq 40960 ]; then
                links=$((links + 1))
                if [ "$links" -gt 40 ]; then why="$path: too many symbolic links"; return 1; fi
                target=$("$readlink" -- "$ent") && [ -n "$target" ] || {
                    why="cannot read $ent"; return 1; }
                case $target in /*) ;; *) target=${ent%/*}/$target ;; esac
                next=$target${top#"$ent"}$rest
                break
            fi
            if [ "$ent" = "$last" ] && [ -z "$rest" ]; then
                if [ "$kind" -ne 32768 ]; then why="$ent is not a regular file"; return 1; fi
                if others_write "$mode" "$gid"; then
                    why="$ent is writable by other users"; return 1
                fi
                real=$ent
                return 0
            fi
            if [ "$kind" -ne 16384 ]; then why="$ent is not a directory"; return 1; fi
            pmode=$mode pgid=$gid parent=$ent
        done
        IFS=$ws
        if [ -z "$next" ]; then  # climb the `..`: every directory before it is real
            [ -n "$rest" ] || { why="$path is not a file"; return 1; }
            next=${top%/*}${rest#/..}
        fi
        pending=${next:-/}
    done
}"""

RUNTIME_TEMPLATE = r"""#!/bin/sh
# nvidia-container-runtime: launcher generated by nvdocker2.runtime.launcher.
# Not `create` (nor direct mode's `direct-hook`, nor `--version`), and config.toml sets
# neither runtimes nor debug: exec the low-level runtime straight away (what
# nvdocker2.runtime would do, without starting Python) when it passes the door's rules.
# Else run nvdocker2.runtime, with an interpreter that passes them.
set -f
prog=nvidia-container-runtime
py=@PYTHON@
code=@CODE@
@CONFIG@@DOOR@
slow=
case ${1-} in direct-hook|--version|-v) slow=1 ;; esac
for arg do
    if [ "$arg" = create ]; then slow=1; break; fi
done
conf=${NVIDIA_CONTAINER_RUNTIME_CONFIG:-/etc/nvidia-container-runtime/config.toml}
# `create` left this in the bundle (containerd's cwd for every call) when config.toml asked
# nothing of a pass-through, naming the low-level runtime it checked: no need to read
# config.toml again, nor to check that runtime. Only this user's file, not a link, in a
# directory of this user's counts: no other user can make one.
mark=./.nvidia-container-runtime-plain
runc=
if [ -f $mark ] && ! [ -h $mark ] && [ -O $mark ] && [ -O . ]; then
    read -r runc < $mark || :
elif [ -z "$slow" ] && [ -e "$conf" ]; then
    if [ -f "$conf" ] && [ -r "$conf" ]; then
        # sh reads a file a byte at a time: stop where nothing later can set these keys, at
        # the hook's or the cli's table after [nvidia-container-runtime] (a multi-line string,
        # the one thing that could hide a table line, sends us to Python first).
        seen=
        while read -r line || [ -n "$line" ]; do
            case $line in
                '#'*) ;;
                '[nvidia-container-runtime]') seen=1 ;;
                '[nvidia-container-runtime-hook]'|'[nvidia-container-cli]')
                    [ -z "$seen" ] || break ;;
                *runtimes*|*debug*|*log-level*|*'\'*|*\"\"\"*|*"'''"*) slow=1; break ;;
            esac
        done < "$conf"
    else
        slow=1
    fi
fi
if [ -z "$slow" ]; then
    case $runc in
        /*) if [ -f "$runc" ] && [ -x "$runc" ] && ! [ "$runc" -ef "$0" ]; then
                exec "$runc" "$@"
            fi ;;
    esac
    # The first on PATH (absolute entries only) when it passes the door's rules; else Python
    # finds the same one and says why it refuses it.
    IFS=:
    for want in docker-runc runc crun; do
        for dir in ${PATH-/bin:/usr/bin}; do
            case $dir in /*) ;; *) continue ;; esac
            cand=$dir/$want
            if [ -f "$cand" ] && [ -x "$cand" ] && ! [ "$cand" -ef "$0" ]; then
                IFS=$ws
                trusted "$cand" && exec "$cand" "$@"
                break 2
            fi
        done
    done
    IFS=$ws
fi
@FIND@exec "$py" -I -S -c "$code" "$self" "$@"
"""

RUNTIME_CODE = (
    "import sys; sys.path[len(sys.path):] = {paths}; "
    "from nvdocker2.runtime import launch; launch(sys.argv[2:], sys.argv[1])"
)

HOOK_TEMPLATE = '''#!{python} -IS
"""nvidia-container-runtime-hook: launcher generated by nvdocker2.runtime.launcher."""
import sys

sys.path[len(sys.path):] = {paths}
from nvdocker2.hook import main

sys.exit(main())
'''


# Before Python: this launcher's own file, links followed, must pass the door (Python is told
# that path: the package beside it is imported, and direct mode's hook entry runs it), and so
# must the interpreter.
SELF = r"""self=
# A path without links that passes the door is the file itself, what `readlink -f` would
# print: no program to run for it on every create. Else links are resolved first, and the
# file they lead to must pass (a link may sit where the door would refuse the path itself).
case $0 in /*) trusted "$0" && [ "$links" -eq 0 ] && self=$real ;; esac
if [ -z "$self" ]; then
    why=
    [ -z "$readlink" ] || self=$("$readlink" -f -- "$0") || self=
    if [ -z "$self" ]; then
        why="cannot resolve $0"
    else
        trusted "$self" || :
    fi
fi
if [ -n "$why" ]; then
    echo "$prog: error: refusing to run from $0: $why" >&2
    echo "$prog: hint: install nvdocker2 where only root can write (links followed)" >&2
    exit 1
fi
"""
CHECK_PYTHON = r"""if ! trusted "$py"; then
    echo "$prog: error: refusing to run $py: $why" >&2
    echo "$prog: hint: the interpreter must belong to root, in directories only root can write" >&2
    exit 1
fi
"""

# pip's launchers: the interpreter pip wrote into the `nvdocker2` console script beside this
# launcher's own file (pipx links both from ~/.local/bin; `#!PYTHON`, or pip's `#!/bin/sh`
# form for a long path or one with spaces), else python3 on PATH (absolute entries only).
FIND_PYTHON = SELF + r"""py=
if [ -r "${self%/*}/nvdocker2" ]; then
    { read -r first; read -r second; } < "${self%/*}/nvdocker2" || :
    case $first in
        '#!/bin/sh') py=${second#*exec\' \"}; py=${py%%\"*} ;;
        '#!'*) py=${first#??}; py=${py%% *} ;;
    esac
fi
if [ -z "$py" ]; then
    IFS=:
    for dir in ${PATH-/bin:/usr/bin}; do
        IFS=$ws
        case $dir in /*) ;; *) continue ;; esac
        if [ -f "$dir/python3" ] && [ -x "$dir/python3" ]; then py=$dir/python3; break; fi
    done
    IFS=$ws
    if [ -z "$py" ]; then
        echo "$prog: error: no python3 on PATH (absolute entries only), nor beside $self" >&2
        echo "$prog: hint: put python3 in /usr/bin, or reinstall nvdocker2 with pip" >&2
        exit 1
    fi
fi
""" + CHECK_PYTHON

# The end of the launchers that always run Python: the code, the door, the checks of this
# file and the interpreter (@FIND@), then Python with -I -S.
ISOLATED_TAIL = r"""code=@CODE@
@DOOR@
@FIND@exec "$py" -I -S -c "$code" "$self" "$@"
"""

CLI_NAME = "nvidia-container-cli"
CLI_TEMPLATE = r"""#!/bin/sh
# nvidia-container-cli (nvdocker2's own): launcher generated by nvdocker2.runtime.launcher.
# Runs nvdocker2.nvc with python3 -I -S (no site set-up, no PYTHON* variables from the
# caller's environment), when this file and the interpreter pass the door's rules.
set -f
prog=nvidia-container-cli
py=@PYTHON@
""" + ISOLATED_TAIL
CLI_CODE = (
    "import sys; sys.path[len(sys.path):] = {paths}; "
    "from nvdocker2.nvc.main import main; sys.exit(main(sys.argv[2:]))"
)

PIP_HOOK_TEMPLATE = r"""#!/bin/sh
# nvidia-container-runtime-hook: launcher generated by nvdocker2.runtime.launcher (pip).
# Runs nvdocker2.hook with python3 -I -S (no site set-up, no PYTHON* variables), with an
# interpreter that passes the door's rules.
set -f
prog=nvidia-container-runtime-hook
""" + ISOLATED_TAIL

# Under -S, the package directory of a pip install: PREFIX/lib/pythonX.Y/site-packages (venv,
# pipx, --user, --prefix) or Debian's dist-packages, PREFIX being the directory above the
# launcher's (links followed); failing those, Python's own site set-up finds it.
PIP_PATHS = (
    "import sys\n"
    "def _nvdocker2_path(launcher):\n"
    "    import os\n"
    "    pre = os.path.dirname(os.path.dirname(os.path.realpath(launcher)))\n"
    "    v = \"python%d.%d\" % sys.version_info[:2]\n"
    "    for d in (f\"{pre}/lib/{v}/site-packages\", f\"{pre}/lib/python3/dist-packages\",\n"
    "              f\"{pre}/lib/{v}/dist-packages\"):\n"
    "        if os.path.isfile(f\"{d}/nvdocker2/__init__.py\"):\n"
    "            sys.path.append(d)\n"
    "            return\n"
    "    import site\n"
    "    site.main()\n"
    "_nvdocker2_path(sys.argv[1])\n"
)
PIP_RUNTIME_CODE = PIP_PATHS + (
    "from nvdocker2.runtime import launch\nlaunch(sys.argv[2:], sys.argv[1])\n")
PIP_HOOK_CODE = PIP_PATHS + "from nvdocker2.hook import main\nsys.exit(main(sys.argv[2:]))\n"


def render_pip() -> dict[str, str]:
    """{executable name: file text} of the launchers a pip install puts on PATH."""
    runtime = (RUNTIME_TEMPLATE.replace("@PYTHON@", "").replace("@CONFIG@", "")
               .replace("@DOOR@", DOOR)
               .replace("@CODE@", shlex.quote(PIP_RUNTIME_CODE)).replace("@FIND@", FIND_PYTHON))
    hook = (PIP_HOOK_TEMPLATE.replace("@CODE@", shlex.quote(PIP_HOOK_CODE))
            .replace("@DOOR@", DOOR).replace("@FIND@", FIND_PYTHON))
    return {"nvidia-container-runtime": runtime, "nvidia-container-runtime-hook": hook}


def package_paths() -> list[str]:
    """Directories that must be on sys.path under `-S`: nvdocker2's, and tomli's on < 3.11."""
    import nvdocker2

    paths = [os.path.dirname(os.path.dirname(os.path.abspath(nvdocker2.__file__)))]
    if sys.version_info < (3, 11):  # pragma: no cover
        import tomli

        tomli_dir = os.path.dirname(os.path.dirname(os.path.abspath(tomli.__file__)))
        if tomli_dir not in paths:
            paths.append(tomli_dir)
    return paths


def render(python: str, paths: list[str], config: str | None = None) -> dict[str, str]:
    """{executable name: file text} of both launchers.

    Both hold the line `sys.path[len(sys.path):] = [...]` with the directories as a JSON list
    (also a Python literal), which `nvdocker2 doctor` reads to find the package's version.
    `config`: the runtime reads that config.toml, whatever its environment says (a toolkit
    directory's own, nvdocker2.agent.toolkit); it passes it on to the hook as `--config`."""
    import json

    listed = json.dumps(list(paths))
    code = RUNTIME_CODE.format(paths=listed)
    pinned = (f"NVIDIA_CONTAINER_RUNTIME_CONFIG={shlex.quote(config)}\n"
              "export NVIDIA_CONTAINER_RUNTIME_CONFIG\n") if config else ""
    runtime = (RUNTIME_TEMPLATE.replace("@PYTHON@", shlex.quote(python))
               .replace("@CONFIG@", pinned)
               .replace("@DOOR@", DOOR).replace("@CODE@", shlex.quote(code))
               .replace("@FIND@", SELF + CHECK_PYTHON))
    return {
        "nvidia-container-runtime": runtime,
        "nvidia-container-runtime-hook": HOOK_TEMPLATE.format(python=python, paths=listed),
    }


def render_cli(python: str, paths: list[str]) -> str:
    """The text of our nvidia-container-cli's launcher (its sys.path line as the others')."""
    import json

    code = CLI_CODE.format(paths=json.dumps(list(paths)))
    return (CLI_TEMPLATE.replace("@PYTHON@", shlex.quote(python)).replace("@DOOR@", DOOR)
            .replace("@CODE@", shlex.quote(code)).replace("@FIND@", SELF + CHECK_PYTHON))


def _write_executable(dest: str, name: str, text: str) -> str:
    path = os.path.join(dest, name)
    tmp = path + ".tmp"
    try:
        os.unlink(tmp)  # left by an interrupted run
    except FileNotFoundError:
        pass
    write_new(tmp, text.encode("utf-8"), 0o755)
    os.replace(tmp, path)
    return path


def write_launchers(dest: str, python: str | None = None, paths: list[str] | None = None,
                    pip: bool = False) -> list[str]:
    """Write both launchers into `dest` (mode 0755); returns their paths. `pip`: the ones a
    pip install ships, which find the interpreter and the package themselves."""
    python = python or sys.executable
    texts = render_pip() if pip else render(python, paths or package_paths())
    return [_write_executable(dest, name, text) for name, text in texts.items()]


def write_cli_launcher(dest: str, python: str | None = None,
                       paths: list[str] | None = None) -> str:
    """Write our nvidia-container-cli's launcher into `dest` (mode 0755); its path."""
    text = render_cli(python or sys.executable, paths or package_paths())
    return _write_executable(dest, CLI_NAME, text)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m nvdocker2.runtime.launcher")
    parser.add_argument("dest", help="directory for the two launchers (e.g. /usr/bin)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run")
    parser.add_argument("--path", action="append", help="sys.path entry (default: nvdocker2's)")
    parser.add_argument("--pip", action="store_true",
                        help="the launchers a pip install ships (nvdocker2/runtime/bin)")
    parser.add_argument("--cli", metavar="DIR",
                        help="also write our nvidia-container-cli's launcher into DIR (not"
                        " DEST: /usr/bin/nvidia-container-cli is NVIDIA's)")
    args = parser.parse_args(argv)
    if args.cli and os.path.realpath(args.cli) == os.path.realpath(args.dest):
        parser.error("--cli DIR must not be DEST")
    for path in write_launchers(args.dest, args.python, args.path, args.pip):
        print(path)
    if args.cli:
        print(write_cli_launcher(args.cli, args.python, args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
