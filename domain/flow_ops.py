"""The operator's flow-control decisions: change a Work's priority, pause and resume a pool,
a key or a scope. Pure: each returns the event to append, None when the state already is
what was asked (a no-op, nothing appended), or refuses.

A pause holds back the ready Work it covers at admission (`flow_paused`,
`rota.domain.flow_checks`): nothing is deleted or re-queued, running attempts go on, and
the held Works start at the first pass after the resume. A pool pause covers the Works
whose executor runs in that pool, a key pause the Works carrying that key (and no other
key's), a scope pause the Works of that scope and of every scope below it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast, get_args

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events.flow import FlowPaused, FlowResumed, PauseTarget, WorkReprioritized
from rota.domain.flow import KEY, SCOPE, check_priority
from rota.domain.state import WorkState

PAUSES = "flow/pauses"
TARGETS: tuple[str, ...] = get_args(PauseTarget)
POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCOPE_MAX = 200
MAX_REASON = 1000
MAX_BY = 200
_FORMS = {
    "pool": (POOL, "like jobs or agents"),
    "key": (KEY, "like tenant:acme"),
    "scope": (SCOPE, "a path like root/team"),
}


def pause_name(target: str, name: str) -> str:
    """The projection's name of a pause (`pool:jobs`, `key:tenant:acme`, `scope:root/a`)."""
    return f"{target}:{name}"


def check_target(target: object, name: object) -> tuple[PauseTarget, str]:
    """Refuse (`invalid_flow`) a target that is not pool, key or scope, or a name that is
    not of its form."""
    if target not in TARGETS:
        raise InvalidCommand(
            f"pause target {str(target)[:40]!a} must be one of {', '.join(TARGETS)}",
            code=DomainCode.INVALID_FLOW,
        )
    pattern, form = _FORMS[target]
    too_long = target == "scope" and isinstance(name, str) and len(name) > SCOPE_MAX
    if type(name) is not str or too_long or not pattern.fullmatch(name):
        raise InvalidCommand(
            f"{target} name {str(name)[:80]!a} must match {pattern.pattern} ({form})",
            code=DomainCode.INVALID_FLOW,
        )
    return cast(PauseTarget, target), name


def _check_words(reason: str, by: str) -> None:
    if len(reason) > MAX_REASON or len(by) > MAX_BY:
        raise InvalidCommand(
            f"a reason is at most {MAX_REASON} characters and who acted at most {MAX_BY}",
            code=DomainCode.INVALID_COMMAND,
        )


def reprioritize(
    work: WorkState | None,
    *,
    work_id: str,
    priority: object,
    by: str = "operator",
    reason: str = "",
) -> Emit | None:
    """Give a Work that is not finished a new priority (`core.work.reprioritized`); None
    when it already has it. Admission orders by it from the next pass on."""
    checked = check_priority(priority)
    _check_words(reason, by)
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(f"Work {work_id!r} is already {work.terminal}", code=DomainCode.WORK_TERMINAL)
    if work.priority == checked:
        return None
    event = WorkReprioritized(
        work_id=work_id, priority=checked, previous=work.priority, by=by, reason=reason
    )
    return Emit(work_stream(work_id), event)


def pause(
    paused: Mapping[str, str],
    *,
    target: object,
    name: object,
    reason: str = "",
    by: str = "operator",
) -> Emit | None:
    """Pause a pool, a key or a scope (`core.flow.paused`); None when it is paused already
    (its first reason stays)."""
    kind, checked = check_target(target, name)
    _check_words(reason, by)
    if pause_name(kind, checked) in paused:
        return None
    return Emit(PAUSES, FlowPaused(target=kind, name=checked, by=by, reason=reason))


def resume(
    paused: Mapping[str, str], *, target: object, name: object, by: str = "operator"
) -> Emit:
    """Resume a paused pool, key or scope (`core.flow.resumed`); one that is not paused is
    refused (`not_paused`)."""
    kind, checked = check_target(target, name)
    _check_words("", by)
    if pause_name(kind, checked) not in paused:
        raise Refusal(
            f"{kind} {checked} is not paused (`rota paused` lists what is)",
            code=DomainCode.NOT_PAUSED,
        )
    return Emit(PAUSES, FlowResumed(target=kind, name=checked, by=by))


__all__ = ["PAUSES", "TARGETS", "check_target", "pause", "pause_name", "reprioritize", "resume"]
