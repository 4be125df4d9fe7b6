#!/usr/bin/python3
"""Write the man pages of the four executables into OUTDIR (used by debian/rules and the rpm spec).

nvdocker2(1) is made from the `--help` output of the built program and each of its commands,
so it cannot drift from the code; the build fails when a command's help does not run.
nvidia-container-runtime, its hook and nvidia-docker hand their command line to runc and docker
(their `--help` is runc's or docker's), so their pages are the short text below, from
reference §1, §3 and §4.

Usage: PYTHONPATH=BUILT_TREE manpages.py VERSION OUTDIR
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

# The maintainer scripts call these; a CLI without them must not be packaged.
REQUIRED_COMMANDS = ["install", "uninstall"]

SEE_ALSO = {
    "nvdocker2": ["nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-docker"],
    "nvidia-container-runtime": ["nvidia-container-runtime-hook", "nvdocker2", "runc"],
    "nvidia-container-runtime-hook": ["nvidia-container-runtime", "nvidia-container-cli"],
    "nvidia-docker": ["docker", "nvdocker2", "nvidia-container-runtime"],
}

SUMMARY = {
    "nvdocker2": "add the NVIDIA runtime to Docker's daemon.json, and take it out again, safely",
    "nvidia-container-runtime": "OCI runtime that adds the NVIDIA prestart hook, then runs runc",
    "nvidia-container-runtime-hook": "OCI prestart hook that sets up NVIDIA GPUs in a container",
    "nvidia-docker": "run docker with the NVIDIA runtime",
}

# Hand-written sections: (heading, roff body). Plain text; a line starting with ".TP" etc. is roff.
HAND = {
    "nvidia-container-runtime": [
        (
            "SYNOPSIS",
            r"\fBnvidia-container-runtime\fR [\fIRUNC-OPTIONS\fR] \fICOMMAND\fR [\fIARGS\fR...]",
        ),
        (
            "DESCRIPTION",
            (
                "An OCI runtime for dockerd and containerd. On \\fBcreate\\fR it adds one prestart "
                "hook, \\fBnvidia-container-runtime-hook\\fR, to the bundle's \\fIconfig.json\\fR, "
                "then executes the low-level runtime (the first of runc, crun found on PATH, or "
                "the configured one) with the same arguments. Every other command goes to the "
                "low-level runtime unchanged, so its options and \\fB--help\\fR are that "
                "runtime's.\n.PP\n"
                "Install it into Docker with \\fBnvdocker2 install\\fR."
            ),
        ),
        (
            "ENVIRONMENT",
            (
                ".TP\n.B NVIDIA_CONTAINER_RUNTIME_CONFIG\nRead this configuration file instead of "
                "\\fI/etc/nvidia-container-runtime/config.toml\\fR; it is passed on to the hook."
            ),
        ),
        ("FILES", ".TP\n.I /etc/nvidia-container-runtime/config.toml\nConfiguration (TOML)."),
    ],
    "nvidia-container-runtime-hook": [
        (
            "SYNOPSIS",
            (
                r"\fBnvidia-container-runtime-hook\fR [\fB--config\fR \fIFILE\fR] [\fB--debug\fR] "
                r"\fBprestart\fR|\fBpoststart\fR|\fBpoststop\fR"
            ),
        ),
        (
            "DESCRIPTION",
            (
                "Run by the OCI runtime, not by hand. On \\fBprestart\\fR it reads the container "
                "state on standard input, reads the GPUs and driver capabilities the container "
                "asks for (\\fBNVIDIA_VISIBLE_DEVICES\\fR, \\fBNVIDIA_DRIVER_CAPABILITIES\\fR, "
                "\\fBNVIDIA_REQUIRE_*\\fR) and executes \\fBnvidia-container-cli configure\\fR for "
                "the container's root file system. A container that asks for no GPU is left alone. "
                "\\fBpoststart\\fR and \\fBpoststop\\fR do nothing.\n.PP\n"
                "\\fBdocker run --gpus\\fR makes dockerd run this hook from its PATH without the "
                "nvidia runtime."
            ),
        ),
        (
            "OPTIONS",
            (
                '.TP\n.BI --config " FILE"\nRead this configuration file (else '
                "\\fBNVIDIA_CONTAINER_RUNTIME_CONFIG\\fR, else "
                "\\fI/etc/nvidia-container-runtime/config.toml\\fR).\n.TP\n.B --debug\n"
                "Log what the hook decides."
            ),
        ),
        ("FILES", ".TP\n.I /etc/nvidia-container-runtime/config.toml\nConfiguration (TOML)."),
    ],
    "nvidia-docker": [
        ("SYNOPSIS", r"\fBnvidia-docker\fR [\fIDOCKER-OPTIONS\fR] \fICOMMAND\fR [\fIARGS\fR...]"),
        (
            "DESCRIPTION",
            (
                "Runs docker. For \\fBrun\\fR and \\fBcreate\\fR (also \\fBcontainer run\\fR, "
                "\\fBcontainer create\\fR) it adds \\fB--runtime=nvidia\\fR right after the "
                "command, and \\fB-e NVIDIA_VISIBLE_DEVICES=\\fR\\fILIST\\fR when "
                "\\fBNV_GPU\\fR is set. "
                "\\fBversion\\fR first prints \\fBNVIDIA Docker:\\fR and this package's version "
                "(on standard error when \\fB--format\\fR is given). Anything else goes to docker "
                "unchanged; docker replaces this process, so the exit status is docker's. "
                "Options and \\fB--help\\fR are docker's."
            ),
        ),
        (
            "ENVIRONMENT",
            (
                ".TP\n.B NV_GPU\nGPUs for the container: indices, \\fIN\\fR:\\fIM\\fR MIG indices, "
                "GPU-/MIG- UUIDs, \\fBall\\fR or \\fBnone\\fR, separated by spaces or commas. "
                "Anything else is refused (exit status 2) before docker runs.\n"
                ".TP\n.B NV_DOCKER\nThe docker command (default \\fBdocker\\fR), split like shell "
                "words, e.g. \\fBsudo docker\\fR."
            ),
        ),
        (
            "EXAMPLES",
            (
                ".nf\nNV_GPU='0 1' nvidia-docker run --rm IMAGE nvidia-smi\n"
                "# runs: docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0,1 --rm IMAGE "
                "nvidia-smi\n.fi"
            ),
        ),
    ],
}

_BOX_TOP = re.compile(r"^\s*╭─+ ?(.*?) ?─*╮\s*$")
_BOX_BOTTOM = re.compile(r"^\s*╰─*╯\s*$")
_BOX_SIDE = re.compile(r"^\s*│(.*?)│?\s*$")


def plain(text: str) -> str:
    """rich's boxed help as plain text: a box title becomes a heading line, borders go."""
    lines = []
    for line in text.splitlines():
        top = _BOX_TOP.match(line)
        if top:
            lines.append(f"{top.group(1)}:")
            continue
        if _BOX_BOTTOM.match(line):
            lines.append("")
            continue
        side = _BOX_SIDE.match(line)
        lines.append(side.group(1).rstrip() if side else line.rstrip())
    return "\n".join(lines).strip("\n")


def roff_text(text: str) -> str:
    """Plain text as literal roff lines (backslashes, leading dots and quotes escaped)."""
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def run_help(args: list[str]) -> str:
    """The `nvdocker2 ARGS --help` output of the tree on PYTHONPATH, as plain text."""
    env = dict(os.environ, COLUMNS="80", TERM="dumb", NO_COLOR="1", LC_ALL="C.UTF-8")
    code = (
        "import sys; from nvdocker2.cli import main; "
        f"sys.argv = ['nvdocker2'] + {args!r} + ['--help']; sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        sys.exit(
            f"error: `nvdocker2 {' '.join(args + ['--help'])}` failed (exit {proc.returncode}):\n"
            f"{proc.stderr.strip()}\nhint: the man page is made from this output; fix the CLI"
        )
    return plain(proc.stdout)


def commands(main_help: str) -> list[str]:
    """The command names listed under "Commands:" in the top-level help."""
    names, inside = [], False
    for line in main_help.splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside and not line.strip():
            break
        match = re.match(r"^ {1,2}([a-z][a-z0-9-]*)(?: {2,}|$)", line) if inside else None
        if match:
            names.append(match.group(1))
    for name in REQUIRED_COMMANDS:
        if name not in names:
            sys.exit(f"error: `nvdocker2 --help` lists no {name!r} command (found {names})")
    return names


def page(name: str, version: str, date: str, sections: list[tuple[str, str]]) -> str:
    head = [
        f'.TH {name.upper()} 1 "{date}" "nvdocker2 {version}" "User Commands"',
        ".SH NAME",
        f"{name} \\- {SUMMARY[name]}",
    ]
    body = []
    for heading, text in sections:
        body += [f".SH {heading}", text]
    refs = ",\n".join(f".BR {ref} (1)" for ref in SEE_ALSO[name])
    return "\n".join(head + body + [".SH SEE ALSO", refs]) + "\n"


def nvdocker2_sections() -> list[tuple[str, str]]:
    main_help = run_help([])
    sections = [
        ("SYNOPSIS", r"\fBnvdocker2\fR \fICOMMAND\fR [\fIOPTIONS\fR]"),
        ("DESCRIPTION", ".nf\n" + roff_text(main_help) + "\n.fi"),
    ]
    pages = []
    for command in commands(main_help):
        pages.append(f".SS {command}\n.nf\n{roff_text(run_help([command]))}\n.fi")
    sections.append(("COMMANDS", "\n".join(pages)))
    sections.append(
        (
            "FILES",
            (
                ".TP\n.I /etc/docker/daemon.json\nDocker's configuration, edited in place.\n"
                ".TP\n.I /var/lib/nvdocker2\nBackups, the change journal and the lock "
                "(\\fBNVDOCKER2_STATE_DIR\\fR)."
            ),
        )
    )
    return sections


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    version, outdir = sys.argv[1], Path(sys.argv[2])
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    date = time.strftime("%B %Y", time.gmtime(epoch))
    outdir.mkdir(parents=True, exist_ok=True)
    pages = {"nvdocker2": nvdocker2_sections(), **HAND}
    for name, sections in pages.items():
        (outdir / f"{name}.1").write_text(page(name, version, date, sections), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
