"""The command line of `nvidia-container-cli`, read the way libnvidia-container's cli reads it.

NVIDIA's cli parses with glibc's argp: global options in order up to the command (`info`,
`list`, `configure`), then the command's options and arguments in any order; long options
take `--name=VALUE` or `--name VALUE` and may be abbreviated to a unique prefix; short ones
may be bundled (`-kn`). A bad command line prints what is wrong, then the "Try ... --help"
line, and exits 1 (`argp_err_exit_status = EXIT_FAILURE`); `--help`, `--usage` and
`--version` print and exit 0. Pure functions: nothing here touches the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

PROG = "nvidia-container-cli"
EXIT_FAILURE = 1
MAX_REQUIREMENTS = 32  # the size of NVIDIA's ctx->reqs


@dataclass(frozen=True)
class Opt:
    """One option: long name, short letter (or ""), the value's name ("" for a flag), and
    whether the value is optional (then only `--name=VALUE` or `-xVALUE` gives one)."""

    name: str
    short: str = ""
    value: str = ""
    optional: bool = False
    doc: str = ""


GLOBAL = (
    Opt("debug", "d", "FILE", doc="Log debug information"),
    Opt("load-kmods", "k", doc="Load kernel modules"),
    Opt("no-pivot", "n", doc="Do not use pivot_root"),
    Opt("user", "u", "UID[:GID]", optional=True,
        doc="User and group to use for privilege separation"),
    Opt("root", "r", "PATH", doc="Path to the driver root directory"),
    Opt("ldcache", "l", "FILE", doc="Path to the system's DSO cache"),
    Opt("no-create-imex-channels", doc="Don't automatically create IMEX channel device nodes"),
)
_SELECTION = (
    Opt("mig-config", value="ID", doc="MIG devices to expose config capabilities files for"),
    Opt("mig-monitor", value="ID", doc="MIG devices to expose monitor capabilities files for"),
    Opt("imex-channel", value="CHANNEL", doc="IMEX channel ID(s) to inject"),
    Opt("no-persistenced", doc="Don't include the NVIDIA persistenced socket"),
    Opt("no-fabricmanager", doc="Don't include the NVIDIA fabricmanager socket"),
)
COMMANDS: dict[str, tuple[tuple[Opt, ...], str, str]] = {
    "info": (
        (Opt("csv", doc="Output in CSV format"),),
        "",
        "Query the driver and report its information as well as the devices it detected.",
    ),
    "list": (
        (
            Opt("device", "d", "ID", doc="Device UUID(s) or index(es) to list"),
            Opt("libraries", "l", doc="List driver libraries"),
            Opt("binaries", "b", doc="List driver binaries"),
            Opt("ipcs", "i", doc="List driver ipcs"),
            Opt("firmwares", "f", doc="List driver firmwares"),
            Opt("compat32", doc="Enable 32bits compatibility"),
            *_SELECTION,
        ),
        "",
        "Query the driver and list the components required in order to configure a container"
        " with GPU support.",
    ),
    "configure": (
        (
            Opt("pid", "p", "PID", doc="Container PID"),
            Opt("device", "d", "ID", doc="Device UUID(s) or index(es) to isolate"),
            Opt("require", "r", "EXPR", doc="Check container requirements"),
            Opt("ldconfig", "l", "PATH", doc="Path to the ldconfig binary"),
            Opt("compute", "c", doc="Enable compute capability"),
            Opt("utility", "u", doc="Enable utility capability"),
            Opt("video", "v", doc="Enable video capability"),
            Opt("graphics", "g", doc="Enable graphics capability"),
            Opt("display", "D", doc="Enable display capability"),
            Opt("ngx", doc="Enable ngx capability"),
            Opt("compat32", doc="Enable 32bits compatibility"),
            Opt("no-cgroups", doc="Don't use cgroup enforcement"),
            Opt("no-devbind", doc="Don't bind mount devices"),
            *_SELECTION,
        ),
        "ROOTFS",
        "Configure a container with GPU support by exposing device drivers to it.",
    ),
}


_SHORT = {
    "info": "Report information about the driver and devices",
    "list": "List driver components",
    "configure": "Configure a container with GPU support",
}


class UsageError(Exception):
    """The command line is wrong: `text` is what argp prints (without the Try line); `prog`
    is the program name argp names (`nvidia-container-cli configure` inside a command)."""

    def __init__(self, text: str, prog: str = PROG, usage: bool = False) -> None:
        super().__init__(text)
        self.text = text
        self.prog = prog
        self.usage = usage


class InputError(Exception):
    """A value is wrong (NVIDIA's `input error: ...`)."""


@dataclass(frozen=True)
class Shown:
    """--help, --usage or --version: print `text` and exit 0."""

    text: str


@dataclass
class Parsed:
    """What the command line says: the command, each option's values in order, the args."""

    command: str
    globals: dict[str, list[str | None]] = field(default_factory=dict)
    options: dict[str, list[str | None]] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)

    def flag(self, name: str) -> bool:
        return name in self.options or name in self.globals

    def last(self, name: str, where: str = "options") -> str | None:
        values = getattr(self, where).get(name)
        return values[-1] if values else None

    def joined(self, name: str) -> str | None:
        """Values of a repeated list option joined with commas (NVIDIA's str_join)."""
        values = [v for v in self.options.get(name, ()) if v is not None]
        return ",".join(values) if name in self.options else None


def _help(prog: str, opts: tuple[Opt, ...], args_doc: str, doc: str, commands: bool) -> str:
    lines = [f"Usage: {prog} [OPTION...] {args_doc}".rstrip(), doc, "", "Options:"]
    rows = []
    for o in opts + (Opt("help", "?", doc="Give this help list"),
                     Opt("usage", doc="Give a short usage message"),
                     Opt("version", "V", doc="Print program version")):
        value = (f"[={o.value}]" if o.optional else f"={o.value}") if o.value else ""
        head = (f"-{o.short}, " if o.short else "    ") + f"--{o.name}{value}"
        rows.append((head, o.doc))
    if commands:
        rows += [("", ""), ("Commands:", "")] + [(f"  {n}", d) for n, d in _SHORT.items()]
    lines += [f"  {h:<30} {d}".rstrip() if h and not h.startswith("Commands") else h
              for h, d in rows]
    return "\n".join(lines)


def _match(opts: tuple[Opt, ...], name: str, prog: str, arg: str) -> Opt:
    exact = [o for o in opts if o.name == name]
    if exact:
        return exact[0]
    found = [o for o in opts if o.name.startswith(name)] if name else []
    if len(found) == 1:
        return found[0]
    if found:
        names = " ".join(f"'--{o.name}'" for o in found)
        raise UsageError(f"option '--{name}' is ambiguous; possibilities: {names}", prog)
    raise UsageError(f"unrecognized option '{arg}'", prog)  # as getopt: the whole word


_BUILTIN = (Opt("help", "?"), Opt("usage"), Opt("version", "V"))


def _parse_level(argv: list[str], opts: tuple[Opt, ...], prog: str, in_order: bool,
                 help_text: str) -> tuple[dict[str, list[str | None]], list[str]]:
    """(option name -> values, the arguments) of one level; `in_order` stops at the first
    argument (the command) and returns it with everything after it."""
    every = opts + _BUILTIN
    values: dict[str, list[str | None]] = {}
    args: list[str] = []
    i = 0

    def take(o: Opt, value: str | None) -> None:
        if o.name == "help":
            raise ShownError(help_text)
        if o.name == "usage":
            raise ShownError(help_text.splitlines()[0])
        if o.name == "version":
            raise ShownError(_version())
        values.setdefault(o.name, []).append(value)

    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            args.extend(argv[i:])
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            o = _match(every, name, prog, arg)
            if not o.value and eq:
                raise UsageError(f"option '--{o.name}' doesn't allow an argument", prog)
            i = _value(o, value if eq else None, argv, i, take,
                       f"option '--{o.name}' requires an argument", prog)
            continue
        if arg.startswith("-") and arg != "-":
            j = 1
            while j < len(arg):
                letter = arg[j]
                j += 1
                o = next((x for x in every if x.short and x.short == letter), None)
                if o is None:
                    raise UsageError(f"invalid option -- '{letter}'", prog)
                if not o.value:
                    take(o, None)
                    continue
                i = _value(o, arg[j:] or None, argv, i, take,
                           f"option requires an argument -- '{letter}'", prog)
                break
            continue
        if in_order:
            args.append(arg)
            args.extend(argv[i:])
            break
        args.append(arg)
    return values, args


def _value(o: Opt, attached: str | None, argv: list[str], i: int,
           take: Callable[[Opt, str | None], None], missing: str, prog: str) -> int:
    """Give `o` its value: `attached` (after `=` or the letter), else for a required value
    the next word; the index of the word after what was used."""
    if not o.value:
        take(o, None)
    elif attached is not None or o.optional:
        take(o, attached)
    elif i < len(argv):
        take(o, argv[i])
        return i + 1
    else:
        raise UsageError(missing, prog)
    return i


class ShownError(Exception):
    """Raised inside the parser for --help/--usage/--version; turned into `Shown`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _version() -> str:
    from nvdocker2 import __version__

    return f"cli-version: {__version__}\nlib-version: none (nvdocker2, pure Python)"


def parse(argv: list[str]) -> Parsed | Shown:
    """Read argv (without the program name); raise UsageError or InputError."""
    top_help = _help(PROG, GLOBAL, "COMMAND [ARG...]",
                     "Command line utility for manipulating NVIDIA GPU containers.", True)
    try:
        globals_, rest = _parse_level(argv, GLOBAL, PROG, True, top_help)
        if not rest or rest[0] not in COMMANDS:
            raise UsageError(f"Usage: {PROG} [OPTION...] COMMAND [ARG...]", PROG, usage=True)
        command = rest[0]
        opts, args_doc, doc = COMMANDS[command]
        prog = f"{PROG} {command}"
        options, args = _parse_level(rest[1:], opts, prog, False,
                                     _help(prog, opts, args_doc, doc, False))
    except ShownError as shown:
        return Shown(shown.text)
    parsed = Parsed(command=command, globals=globals_, options=options, args=args)
    _check(parsed, prog)
    return parsed


def _check(p: Parsed, prog: str) -> None:
    """What argp's parsers check after reading: the arguments and each value's form."""
    if p.command == "configure":
        if len(p.args) != 1:
            raise UsageError(f"Usage: {prog} [OPTION...] ROOTFS", prog, usage=True)
        rootfs = p.args[0]
        if not rootfs.startswith("/") or rootfs == "/":
            raise InputError("invalid rootfs directory")
        for pid in p.options.get("pid", ()):
            parse_pid(pid or "")
        if len(p.options.get("require", ())) > MAX_REQUIREMENTS:
            raise InputError("too many requirements")
    elif p.args:
        raise UsageError("Too many arguments", prog)
    for user in p.globals.get("user", ()):
        if user is not None:
            parse_user(user)
    for name in ("imex-channel",):
        for value in p.options.get(name, ()):
            imex_channels(value or "")


def parse_pid(text: str) -> int:
    """A process id as NVIDIA's str_to_pid reads it: a positive decimal number."""
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**31:
        raise InputError(f"invalid pid: {text!r:.60}")
    return int(text)


def parse_user(text: str) -> tuple[int, int | None]:
    """UID[:GID], decimal."""
    uid, sep, gid = text.partition(":")
    for part in (uid,) + ((gid,) if sep else ()):
        if not (part.isascii() and part.isdigit()) or int(part) >= 2**32 - 1:
            raise InputError(f"invalid user: {text!r:.60}")
    return int(uid), int(gid) if sep else None


def imex_channels(text: str) -> tuple[int, ...]:
    """Comma separated IMEX channel numbers (0 to 2047), "all" refused (no discovery)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not (item.isascii() and item.isdigit()) or int(item) > 2047:
            raise InputError(f"invalid IMEX channel: {item!r:.60}")
        out.append(int(item))
    return tuple(out)
