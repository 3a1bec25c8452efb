"""A listing's filter rules a stored Work row out (`WorkFilter.rules_out`, from its scope,
binding and terminal alone) only when the Work it holds does not match: a necessary test,
never one that drops a match."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rota.domain.state import WorkState
from rota.projections.work_pages import WorkFilter
from rota.projections.work_rows import WorkCodec, row_keys

from .test_held_states import works

STATES = [
    "idle",
    "ready",
    "running",
    "waiting",
    "retry_wait",
    "held",
    "completed",
    "failed",
    "cancelled",
]
filters = st.builds(
    WorkFilter,
    st.none() | st.sampled_from(STATES),
    st.none() | st.sampled_from(["root", "root/", "roo", "other"]),
    st.none() | st.sampled_from(["b", "c"]),
)


@given(works, filters)
def test_a_row_ruled_out_holds_no_match(work: WorkState, where: WorkFilter) -> None:
    keys = row_keys(WorkCodec().encode(work))
    assert (keys.scope, keys.binding, keys.terminal) == (work.scope, work.binding, work.terminal)
    if where.rules_out(keys):
        assert not where.matches(work), (where, work.state)


@given(works)
def test_every_state_but_a_match_is_ruled_out_for_a_terminal_work(work: WorkState) -> None:
    # Not only safe but useful: a terminal Work's row is ruled out for every other state.
    keys = row_keys(WorkCodec().encode(work))
    for state in STATES:
        ruled = WorkFilter(state=state).rules_out(keys)
        if work.terminal is not None:
            assert ruled == (state != work.state)
        else:
            assert ruled == (state in ("completed", "cancelled"))
