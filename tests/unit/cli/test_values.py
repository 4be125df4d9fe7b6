"""Option values come out as typer gives them. typer >= 0.29 converts every value with a pydantic
adapter; nvdocker2.cli.values converts the plain ones itself so that a command line does not
import pydantic. For every option of every command and values of every kind (good, odd and
refused), its result (value and type) or its error (type and message) is the adapter's."""

from __future__ import annotations

import enum
import os
import sys

import pytest

coercion = pytest.importorskip("typer._coercion", reason="typer < 0.29 converts with click")
build_runtime_param = getattr(coercion, "build_runtime_param", None)
if build_runtime_param is None:  # pragma: no cover - a typer this test does not know
    pytest.skip("typer without build_runtime_param", allow_module_level=True)

from nvdocker2.cli import app, typer, values  # noqa: E402

CONTEXT = sys.modules[typer.BadParameter.__module__.rsplit(".", 1)[0]].Context

TEXTS = ["x", "", " a ", "-", "--flag", "é", "a\0b", "30", "none", "NONE", "None", " none",
         "auto", "bogus", "docker", "Docker", "direct", "0.5", ".5", "5.", "1e3", "inf", "nan",
         "-1", "007", "1.0", "1_0", " 2", "9" * 20, "1" * 15, "٣", "/etc/docker/daemon.json",
         "rel/path/", "~/d.json", "/tmp", os.getcwd(), "true", "0"]
OTHERS = [None, 30.0, 2, True, False, (), ("a",), ("a", "b"), ["c"], ("a", 1), b"x"]


def params():
    """(command path, parameter) for every option and argument of every command."""
    found = []

    def walk(cmd, path):
        ctx = CONTEXT(cmd)
        for p in cmd.get_params(ctx):
            if getattr(p, "type_descriptor", None) is not None:
                found.append((f"{path} {p.name}", p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "nvdocker2")
    return found


def outcome(runtime_param, value, param, ctx):
    try:
        got = runtime_param.coerce(value, param=param, ctx=ctx)
    except Exception as e:
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        return ("error", type(e).__name__, message)
    return ("value", type(got).__name__, repr(got))


def enum_values(annotation):
    return list(annotation) if isinstance(annotation, type) and issubclass(annotation,
                                                                           enum.Enum) else []


@pytest.mark.parametrize("where, param", params(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_option_converts_each_value_as_typers_adapter_does(where, param):
    d = param.type_descriptor
    quick = values._quick_class()(parameter_info=d.parameter_info, annotation=d.annotation,
                                  descriptor=d)
    typers = build_runtime_param(d)
    ctx = CONTEXT(typer.main.get_command(app))
    for value in TEXTS + OTHERS + enum_values(d.annotation):
        assert outcome(quick, value, param, ctx) == outcome(typers, value, param, ctx), value

