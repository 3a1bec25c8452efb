"""A Work in a state of HELD_STATES is never quiet, so a listing filtered by one may read
the held Works alone (`rota.infrastructure.stored_works`); each other state has quiet
Works, so a listing by it must page the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rota.domain.policy import Binding, Pinned, Registration
from rota.domain.state import AttemptState, Hold, PendingInput, RetryState, WorkState
from rota.projections.held_works import HELD_STATES, is_quiet

T0 = datetime(2026, 7, 1, tzinfo=UTC)
PINNED = Pinned(
    generation="gen1",
    binding=Binding(name="b", executor="x"),
    registration=Registration(name="x"),
    timeout_seconds=60.0,
    lease_seconds=30.0,
)
INPUT = PendingInput(position=1, key="k")
STATUSES = ["starting", "running", "parked", "ended"]


def attempt(status: str, stop_confirmed: bool) -> AttemptState:
    return AttemptState(
        work_id="w",
        number=1,
        epoch=1,
        owner="h",
        lease_expires_at=T0 + timedelta(seconds=30),
        deadline=T0 + timedelta(seconds=60),
        pinned=PINNED,
        consumed=(),
        trigger=None,
        claimed_at=T0,
        status=status,  # type: ignore[arg-type]
        stop_confirmed=stop_confirmed,
    )


def work(**fields: Any) -> WorkState:
    """A Work "w" on binding "b" in scope "root", with `fields`."""
    return WorkState(
        work_id="w",
        scope="root",
        binding="b",
        kind="run-once",
        trigger="all",
        safety="undeclared",
        version=1,
        submitted_at=T0,
        **fields,
    )


works = st.builds(
    lambda terminal, held, pending, current, due, blocked: work(
        pending=(INPUT,) if pending else (),
        attempts=() if current is None else (attempt(*current),),
        retry=RetryState(
            next_due=T0 + timedelta(seconds=5) if due else None,
            blocked_reason="exhausted" if blocked else None,
        ),
        terminal=terminal,
        holds=(Hold("operator", "paused", "op", 1),) if held else (),
    ),
    st.sampled_from([None, "completed", "failed", "cancelled"]),
    st.booleans(),
    st.booleans(),
    st.none() | st.tuples(st.sampled_from(STATUSES), st.booleans()),
    st.booleans(),
    st.booleans(),
)


@given(works)
def test_no_quiet_work_is_in_a_held_state(work: WorkState) -> None:
    if work.state in HELD_STATES:
        assert not is_quiet(work), work


def test_every_other_state_has_quiet_works() -> None:
    quiet_states = {
        work(**fields).state
        for fields in (
            {},  # idle: nothing pending
            {"attempts": (attempt("parked", False),)},  # waiting, nothing pending
            {"holds": (Hold("operator", "paused", "op", 1),), "pending": (INPUT,)},  # held
            {"terminal": "completed"},
            {"terminal": "failed"},
            {"terminal": "cancelled"},
        )
    }
    assert quiet_states == {"idle", "waiting", "held", "completed", "failed", "cancelled"}
    assert quiet_states.isdisjoint(HELD_STATES)
