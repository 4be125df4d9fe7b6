"""What the packages' maintainer scripts say about Docker's daemon.json: one line per outcome.

The .deb's postinst and prerm and the rpm's %post and %preun run `nvdocker2 install|uninstall
--json` and pipe its result here; the result itself never reaches apt's or dnf's log (a shell's
`echo` would mangle its backslashes, and it is dozens of lines for one change). Only a
successful result comes here: on a failure nvdocker2 has already written its `error:` and
`hint:` lines to stderr.

    python3 -I -m nvdocker2.scriptlet install|uninstall|uninstall-cdi  < RESULT.json

Standard library only, like the launchers, and every text from the result goes through
`one_line`, so a path cannot add lines of its own.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from nvdocker2.oneline import one_line

NOT_RELOADED = {
    "install": "dockerd was not reloaded (not running, or not allowed here): it uses the nvidia "
    "runtime once it starts; if it is running, run: systemctl reload docker "
    "(or: kill -HUP $(cat /var/run/docker.pid)), then: nvdocker2 status",
    "uninstall": "dockerd was not reloaded (not running, or not allowed here): if it is running, "
    "run: systemctl reload docker (or: kill -HUP $(cat /var/run/docker.pid))",
}


def _backup(result: dict[str, Any]) -> str:
    if result.get("backup_file"):
        return f"backup {result.get('backup')}: {result['backup_file']}"
    if result.get("backup"):
        return f"backup {result['backup']}: the file did not exist before"
    return "no backup"


def lines(action: str, result: dict[str, Any]) -> list[str]:
    """The lines for `action`'s result: what changed in which file (and its backup), whether
    dockerd was told, and each warning."""
    config = result.get("config") or "daemon.json"
    changed = result.get("changed") is True
    said: list[str] = []
    if action == "install" and changed:
        said.append(f"installed the nvidia runtime in {config} ({_backup(result)})")
    elif action == "install":
        said.append(f"the nvidia runtime is already in {config}: nothing changed")
    elif action == "uninstall" and changed:
        said.append(f"removed the nvidia runtime from {config} ({_backup(result)})")
    elif action == "uninstall":
        said.append(f"the nvidia runtime was not in {config}: nothing changed")
    elif changed:  # uninstall-cdi: quiet when install --mode cdi never ran
        said.append(f"removed CDI mode: {result.get('spec') or 'the CDI spec'} and its settings "
                    f"in {config} ({_backup(result)})")
    reload = result.get("reload")
    if changed and action in NOT_RELOADED:
        said.append(NOT_RELOADED[action] if reload in (None, "none")
                    else f"dockerd told of the change ({reload})")
    said.extend(f"warning: {w}" for w in result.get("warnings") or ())
    return [f"nvdocker2: {one_line(line)}" for line in said]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("install", "uninstall", "uninstall-cdi"):
        sys.stderr.write("usage: python3 -m nvdocker2.scriptlet install|uninstall|uninstall-cdi"
                         " < RESULT.json\n")
        return 2
    raw = sys.stdin.read()
    try:
        result = json.loads(raw)
        if not isinstance(result, dict):
            raise ValueError("not an object")
    except ValueError:
        sys.stdout.write(f"nvdocker2: {args[0]}: no readable result "
                         f"({one_line(raw.strip()[:200]) or 'nothing printed'})\n")
        return 0
    sys.stdout.write("".join(f"{line}\n" for line in lines(args[0], result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
