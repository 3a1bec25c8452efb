"""Optimisation: an append hands back the events it was given instead of decoding what it
wrote (bench lifecycle).

Whether an event is already exactly what decoding its stored form gives back.

An append hands back the events it recorded as a later read or replay will see them. An
event whose every field holds a value of exactly the type its annotation decodes to (a
`str` as a `str`, a `float` field a finite `float`, not an `int`; a `datetime` in UTC; a
`list` for a `list`, a `tuple` for a `tuple`; a nested Struct of exactly its class), and
whose untyped (`Any`) fields hold only JSON scalars, decodes to an event equal to itself,
field by field and type by type: the append can hand back the event it was given instead
of decoding its payload again. Anything else (an `int` given for a `float`, a tuple for a
list, an aware time that is not UTC, a payload dict or list the caller still holds, a type
this module does not know) is decoded, as before.

`canonical_check(cls)` builds one check per Struct class, once: generated Python source,
so that a check costs a few attribute reads and `type(...) is` tests, not a walk over the
annotations.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

Check = Callable[[Any], bool]

_SCALARS = (str, int, bool, type(None))


def _scalar(value: Any) -> bool:
    """A JSON scalar that decodes back as itself (an untyped field's value)."""
    kind = type(value)
    if kind is float:
        return bool(value - value == 0.0)  # finite: msgspec writes nan and inf as null
    return kind in _SCALARS


class _Builder:
    """Generates one check function per Struct class (and per container element type)."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"UTC": UTC, "datetime": datetime, "_scalar": _scalar}
        self.structs: dict[type, str] = {}
        self.count = 0

    def _name(self, prefix: str, value: Any) -> str:
        self.count += 1
        name = f"_{prefix}{self.count}"
        self.names[name] = value
        return name

    def expr(self, annotation: Any, v: str) -> str | None:
        """An expression true when the local `v` decodes back as itself; None: a type this
        module does not know (never canonical)."""
        if annotation is Any:
            return f"({v} is None or _scalar({v}))"
        if annotation is str or annotation is int or annotation is bool:
            return f"type({v}) is {annotation.__name__}"
        if annotation is float:
            return f"(type({v}) is float and {v} - {v} == 0.0)"
        if annotation is None or annotation is type(None):
            return f"{v} is None"
        if annotation is datetime:
            return f"(type({v}) is datetime and {v}.tzinfo is UTC and not {v}.fold)"
        if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
            return self._nested(annotation, v)
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Literal:
            if not all(type(arg) is str for arg in args):
                return None
            return f"(type({v}) is str and {v} in {self._name('literal', frozenset(args))})"
        if origin is Union or origin is types.UnionType:
            parts = [self.expr(arg, v) for arg in args]
            if any(part is None for part in parts):
                return None
            return "(" + " or ".join(typing.cast(list[str], parts)) + ")"
        if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            item = self.expr(args[0], "x")
            if item is None:
                return None
            each = self._define(
                "each", "for x in v:", f"    if not {item}:", "        return False"
            )
            return f"(type({v}) is {origin.__name__} and (not {v} or {each}({v})))"
        if origin is dict and args[0] is str:
            item = self.expr(args[1], "x")
            if item is None:
                return None
            each = self._define(
                "each",
                "for k, x in v.items():",
                f"    if type(k) is not str or not {item}:",
                "        return False",
            )
            return f"(type({v}) is dict and (not {v} or {each}({v})))"
        return None

    def _nested(self, cls: type[msgspec.Struct], v: str) -> str:
        """A nested Struct: of exactly its class, and either the last one seen canonical
        at this field or checked now. Events and what they hold are immutable, so a value
        that was canonical stays so; and the pinned binding of every claim of a binding is
        one object, checked once."""
        seen = self._name("seen", [None])
        remember = self._define(
            "remember",
            f"if not {self.struct(cls)}(v):",
            "    return False",
            f"{seen}[0] = v",
        )
        return f"(type({v}) is {self._name('cls', cls)} and ({v} is {seen}[0] or {remember}({v})))"

    def _define(self, prefix: str, *lines: str) -> str:
        """Define `def name(v):` of `lines`, then `return True`, among the checks; its name."""
        self.count += 1
        name = f"_{prefix}{self.count}"
        body = "".join(f"    {line}\n" for line in (*lines, "return True"))
        exec(compile(f"def {name}(v):\n{body}", f"<canonical {name}>", "exec"), self.names)
        return name

    def struct(self, cls: type[msgspec.Struct]) -> str:
        """The name of the generated check of an instance of exactly `cls` (not checked)."""
        name = self.structs.get(cls)
        if name is not None:
            return name
        hints = typing.get_type_hints(cls)
        lines: list[str] = []
        for index, field in enumerate(cls.__struct_fields__):
            test = self.expr(hints[field], f"f{index}")
            if test is None or cls.__struct_config__.array_like:
                lines = ["return False"]
                break
            lines += [f"f{index} = v.{field}", f"if not {test}:", "    return False"]
        name = self.structs[cls] = self._define(f"{cls.__name__}_", *lines)
        return name


def canonical_check(cls: type[msgspec.Struct]) -> Check:
    """A check that an instance of exactly `cls` (the caller knows its type) decodes from
    its own encoding as itself."""
    builder = _Builder()
    check: Check = builder.names[builder.struct(cls)]
    return check
