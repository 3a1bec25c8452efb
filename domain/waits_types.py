"""The stored shapes of a wait predicate (a tagged union on `kind`); `rota.domain.waits`
validates and judges them. Kept apart so the events and the state can hold them."""

# No `from __future__ import annotations`: stored types resolve their annotations when the
# class is created (see rota.domain.events.base).
from typing import Any

import msgspec


class KeyWait(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="key", gc=False):
    """Input whose key is exactly `key` resumes the attempt."""

    key: str


class SchemaWait(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="schema", gc=False
):
    """Input whose payload the JSON Schema subset `schema` accepts resumes the attempt."""

    schema: dict[str, Any]


class NamedWait(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="named", gc=False):
    """Input a predicate registered on the scheduler as `name` accepts resumes the attempt."""

    name: str


WaitPredicate = KeyWait | SchemaWait | NamedWait
