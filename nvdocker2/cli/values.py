"""Option values as typer >= 0.29 gives them, without importing pydantic for the plain ones.

typer 0.29 turns every option's value into its Python value through a pydantic TypeAdapter,
built when the command line is parsed: importing pydantic and building the adapters is most of
the time `nvdocker2 install` takes. Our options are plain (str, Path, an Enum, float, int, a list
of str); `quicken` gives each of them a converter that returns what typer's adapter returns for
the values whose result is certain (an option's text, a plain decimal number, one of an Enum's
names) and hands every other value, and every error, to typer's own adapter, so results and
messages are typer's. Older typers convert with click's types, without pydantic: there
`quicken` does nothing.
"""

from __future__ import annotations

import enum
import functools
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, List

_UNSURE = object()
# Texts whose int() or float() is what pydantic's lax int or float makes of them: ASCII digits,
# a fraction for float, no sign, space, exponent or underscore, short of any rounding question.
_DIGITS = re.compile(r"[0-9]{1,15}\Z")
_DECIMAL = re.compile(r"(?=.{1,15}\Z)[0-9]+(?:\.[0-9]+)?\Z")


def _typer_parts() -> Any:
    """typer 0.29's RuntimeParam, build_runtime_param and the checks its adapters run; None on
    a typer without them."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_choice, coerce_cli_path
    except ImportError:
        return None
    return RuntimeParam, build_runtime_param, coerce_cli_choice, coerce_cli_path


@functools.cache
def _quick_class() -> Any:
    """typer 0.29's RuntimeParam that converts the values whose result is certain itself and
    every other one with typer's adapter; None on a typer that has no RuntimeParam."""
    parts = _typer_parts()
    if parts is None:
        return None
    runtime_param, build_runtime_param, coerce_cli_choice, coerce_cli_path = parts

    def quick_value(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> Any:
        """What typer's adapter for `annotation` returns for `value`, or `_UNSURE`."""
        if info.parser is not None:
            return _UNSURE
        if annotation is str:
            return value if type(value) is str else _UNSURE
        if annotation is pathlib.Path:
            # typer's path adapter: the Path pydantic makes of the text, then typer's checks.
            if type(value) is not str or not value or "\0" in value \
                    or info.path_type is not None:
                return _UNSURE
            try:
                return coerce_cli_path(pathlib.Path(value), info, path_type=pathlib.Path,
                                       param=param, ctx=ctx)
            except Exception:  # a refused path: typer's adapter says why, in its words
                return _UNSURE
        if getattr(annotation, "__origin__", None) is list and annotation.__args__ == (str,):
            if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
                return list(value)
            return _UNSURE
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            try:
                return coerce_cli_choice(value, choices=tuple(annotation),
                                         case_sensitive=info.case_sensitive, ctx=ctx)
            except ValueError:
                return _UNSURE  # typer's adapter words the error
        if annotation in (int, float) and info.min is None and info.max is None \
                and not info.clamp:
            if type(value) is annotation:
                return value
            if type(value) is str and (_DIGITS if annotation is int else _DECIMAL).match(value):
                return annotation(value)
        return _UNSURE

    @dataclass(frozen=True)
    class QuickParam(runtime_param):  # type: ignore[misc,valid-type]
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            quick = quick_value(self.annotation, self.parameter_info, value, param, ctx)
            if quick is not _UNSURE:
                return quick
            full = build_runtime_param(self.descriptor)
            return full._coerce_value(value, param=param, ctx=ctx)

    return QuickParam


def quicken(params: Iterable[Any]) -> None:
    """Give each typer >= 0.29 parameter in `params` the converter above (typer builds its own,
    with pydantic, only when one is still missing when the value is converted)."""
    todo: List[Any] = [p for p in params if getattr(p, "_runtime_param", False) is None
                       and getattr(p, "type_descriptor", None) is not None]
    if not todo:
        return
    quick = _quick_class()
    if quick is None:
        return
    for p in todo:
        d = p.type_descriptor
        if d.file_annotation is None:
            p._runtime_param = quick(parameter_info=d.parameter_info, annotation=d.annotation,
                                     descriptor=d)
