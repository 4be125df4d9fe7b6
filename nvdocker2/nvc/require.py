"""`--require=EXPR`: the requirement language of libnvidia-container (NVIDIA_REQUIRE_*).

An expression is alternatives separated by spaces, each a comma separated list of
conditions that must all hold: `cuda>=12.0 brand=tesla,driver>=470,driver<471`. A condition
is `NAME OP VALUE` with NAME one of cuda, driver, arch, brand and OP one of = == != < <= > >=.
As in NVIDIA's cli, a fact that is not known holds: this cli knows the driver version (from
/proc/driver/nvidia/version) but neither the CUDA version (it would have to call libcuda) nor
a GPU's architecture or brand, so conditions on those never refuse a container.
"""

from __future__ import annotations

import re

_CONDITION = re.compile(r"^([a-z]+)(==|=|!=|<=|>=|<|>)(.+)$")
RULES = ("cuda", "driver", "arch", "brand")


class RequirementError(Exception):
    """The expression is malformed or not satisfied; the message says which."""


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _compare(left: tuple | str, op: str, right: tuple | str) -> bool:
    if isinstance(left, tuple) and isinstance(right, tuple):
        width = max(len(left), len(right))
        left = left + (0,) * (width - len(left))
        right = right + (0,) * (width - len(right))
    return {
        "=": left == right, "==": left == right, "!=": left != right,
        "<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right,
    }[op]


def holds(condition: str, facts: dict[str, str | None]) -> bool:
    """One `NAME OP VALUE`; RequirementError when it is not one."""
    m = _CONDITION.match(condition)
    if m is None or m.group(1) not in RULES:
        raise RequirementError(f"invalid expression: {condition!r:.100}")
    name, op, value = m.groups()
    known = facts.get(name)
    if name == "brand":
        if op not in ("=", "==", "!="):
            raise RequirementError(f"invalid expression: {condition!r:.100}")
        return True if known is None else _compare(known.lower(), op, value.lower())
    wanted = _version(value)
    if wanted is None:
        raise RequirementError(f"invalid expression: {condition!r:.100}")
    have = _version(known) if known else None
    return True if have is None else _compare(have, op, wanted)


def check(expression: str, facts: dict[str, str | None]) -> None:
    """Raise RequirementError unless one alternative of `expression` holds wholly. Every
    condition is checked for form, also in alternatives after one that holds."""
    satisfied = False
    alternatives = [a for a in expression.split(" ") if a]
    for alternative in alternatives:
        results = [holds(c, facts) for c in alternative.split(",") if c]
        if results and all(results):
            satisfied = True
    if alternatives and not satisfied:
        raise RequirementError(f"unsatisfied condition: {expression:.200}")
