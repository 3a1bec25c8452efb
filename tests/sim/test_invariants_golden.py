"""The invariants over real logs (the golden histories): none is violated on a log rota
wrote, and each reports a minimal tampering of one, with the positions involved, while
every other invariant stays quiet.

Positions below are those of `tests/histories/*.jsonl` (see `.venv/bin/python -P
tests/histories/make_histories.py`): in `recovery`, `adopted/1` is claimed at 10 and
adopted at epoch 2 at 13, `stuck/1` renews at 46-48, times out at 49, arms its retry at
50, has its stop confirmed at 51 and its retry fired at 52; `lost/1` is lost at 23.
"""

from __future__ import annotations

import re
from datetime import timedelta

import msgspec
import pytest

from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptRecovered,
    BudgetCharged,
    BudgetHeld,
    CarriedInput,
    GateRefused,
    HoldReleased,
    InputAccepted,
    LeaseRenewed,
    RetryArmed,
    RetryFired,
    StopConfirmed,
    WorkCancelled,
    WorkSubmitted,
)
from rota.testing.sim.invariants import ALL, INVARIANTS, Checker

from .invariant_logs import (
    NAMES,
    alter,
    check,
    find,
    forge,
    history,
    reported,
    rows,
    settings,
    upto,
)


@pytest.mark.parametrize("name", NAMES)
def test_no_invariant_is_violated_on_a_log_rota_wrote(name: str) -> None:
    checker = Checker(settings(name))
    assert checker.observe_all(rows(name)) == []
    assert checker.checked == len(rows(name))
    assert set(checker.names) == set(INVARIANTS)


def test_every_invariant_has_a_name_and_cites_the_seed_it_guards() -> None:
    assert len(INVARIANTS) == len(ALL) >= 18
    for cls in ALL:
        doc = cls.__doc__ or ""
        statement = INVARIANTS[cls.name]  # the docstring's first sentence
        assert statement.endswith(".") and " ".join(doc.split()).startswith(statement)
        cited = re.search(r"\b00\d_[0-9a-f]{16}\.txt\b", doc) or "DESIGN.md" in doc
        assert cited or "Issue 30, item" in doc, cls.name  # flow control's issue
        assert '"' in doc, f"{cls.name} quotes no sentence"


def test_without_settings_capacity_is_not_checked_and_without_chain_no_chain() -> None:
    names = Checker(None, chain=False).names
    assert "capacity_respected" not in names and "chain_verifies" not in names
    assert set(names) == set(INVARIANTS) - {"capacity_respected", "chain_verifies"}


def test_observe_all_takes_events_alone_or_with_their_rows() -> None:
    events = Checker(settings("recovery"), chain=False)
    assert events.observe_all(history("recovery")) == []
    assert events.checked == len(history("recovery"))


def claim_copy(log: list, position: int, **fields: object) -> AttemptClaimed:
    found = next(r.event for r in log if r.position == position)
    assert isinstance(found, AttemptClaimed)
    return msgspec.structs.replace(found, **fields)


def only(violations: list, invariant: str, *positions: tuple[int, ...]) -> None:
    """Exactly `invariant` reports, at each of `positions` (one violation each)."""
    assert reported(violations) == {invariant}, [str(v) for v in violations]
    assert [v.positions for v in violations] == list(positions)


def test_one_live_attempt_reports_a_second_claim_while_one_is_live() -> None:
    log = upto(history("recovery"), 12)  # adopted/1 claimed (10) and invoked (12)
    tampered = forge(log, claim_copy(log, 10, attempt=2))
    found = check(tampered, "recovery")
    only(found, "one_live_attempt", (10, 13))
    assert "adopted/2 claimed while adopted/1 is live" in found[0].message


def test_one_live_attempt_reports_two_recoveries_of_one_epoch() -> None:
    log = history("recovery")
    recovered = find(log, AttemptRecovered, work_id="adopted")
    tampered = forge(upto(log, 14), recovered.event)  # epoch 1 -> 2 again
    only(check(tampered, "recovery"), "one_live_attempt", (13, 15))


def test_no_stale_epoch_write_reports_a_renewal_at_the_epoch_recovery_replaced() -> None:
    log = upto(history("recovery"), 13)  # adopted/1 recovered at epoch 2
    stale = LeaseRenewed(
        work_id="adopted",
        attempt=1,
        epoch=1,
        lease_expires_at=find(log, AttemptRecovered).event.lease_expires_at + timedelta(minutes=5),  # type: ignore[attr-defined]
    )
    found = check(forge(log, stale), "recovery")
    only(found, "no_stale_epoch_write", (13, 14))
    assert "stale epoch 1" in found[0].message and "adopted/1" in found[0].message


def test_fenced_write_while_live_reports_a_second_outcome() -> None:
    log = upto(history("recovery"), 15)  # adopted/1 completed at 15
    again = AttemptCompleted(work_id="adopted", attempt=1, epoch=2)
    found = check(forge(log, again), "recovery")
    only(found, "fenced_write_while_live", (15, 16))
    assert "ended" in found[0].message


def test_capacity_respected_reports_a_claim_past_a_pool_limit() -> None:
    log = upto(history("admission"), 11)  # a1 (agents) and j1 (jobs) hold the 1 slot each
    submitted = WorkSubmitted(work_id="a9", scope="root", binding="agent")
    tampered = forge(log, submitted, claim_copy(log, 10, work_id="a9"))
    found = check(tampered, "admission")
    only(found, "capacity_respected", (10, 13))
    assert "pool agents" in found[0].message and "a1/1" in found[0].message


def test_capacity_respected_reports_a_claim_past_a_scope_limit() -> None:
    log = history("admission")
    deep = find(log, AttemptClaimed, work_id="deep").position  # root/team, limit 1
    sibling = find(log, AttemptClaimed, work_id="sibling")
    tampered = forge(upto(log, deep), sibling.event)
    found = check(tampered, "admission")
    assert reported(found) == {"capacity_respected"}
    assert any("scope root/team" in v.message and v.positions == (deep, deep + 1) for v in found)


def test_slot_freed_after_stop_reports_a_replacement_before_the_stop_is_confirmed() -> None:
    log = upto(history("recovery"), 50)  # stuck/1 timed out (49), its retry armed (50)
    fired = RetryFired(work_id="stuck", generation=1)
    tampered = forge(log, fired, claim_copy(history("recovery"), 53))
    found = check(tampered, "recovery")
    only(found, "slot_freed_after_stop", (49, 52))
    assert "stuck/1 (timed_out) still holds its slot" in found[0].message


def test_slot_freed_after_stop_reports_a_stop_confirmed_for_a_completed_attempt() -> None:
    log = history("recovery")
    confirmed = StopConfirmed(work_id="adopted", attempt=1, epoch=2)
    only(check(forge(log, confirmed), "recovery"), "slot_freed_after_stop", (15, 57))


def test_relaunch_only_when_nothing_started_reports_relaunching_a_called_launch() -> None:
    log = history("recovery")  # adopted/1's executor was called (12), unisolated
    tampered = alter(log, 13, mode="relaunch")
    found = check(tampered, "recovery")
    only(found, "relaunch_only_when_nothing_started", (10, 13))
    assert "called unisolated" in found[0].message


def test_relaunch_only_when_nothing_started_reports_a_relaunch_to_time_out() -> None:
    log = history("recovery")
    relaunched = find(log, AttemptRecovered, work_id="relaunched").position
    only(
        check(alter(log, relaunched, reason="timeout"), "recovery"),
        "relaunch_only_when_nothing_started",
        (relaunched,),
    )


def test_lease_never_shortened_reports_a_renewal_that_moves_the_expiry_back() -> None:
    log = history("recovery")
    earlier = next(r for r in log if r.position == 46).event.lease_expires_at  # type: ignore[attr-defined]
    tampered = alter(log, 47, lease_expires_at=earlier - timedelta(seconds=1))
    found = check(tampered, "recovery")
    only(found, "lease_never_shortened", (46, 47))


def test_retry_timer_fired_once_reports_a_second_fire() -> None:
    log = history("recovery")
    found = check(forge(log, RetryFired(work_id="stuck", generation=1)), "recovery")
    only(found, "retry_timer_fired_once", (52, 57))
    assert "fired twice" in found[0].message


def test_retry_timer_fired_once_reports_a_fire_of_a_timer_never_armed() -> None:
    log = history("recovery")
    found = check(forge(log, RetryFired(work_id="adopted", generation=1)), "recovery")
    only(found, "retry_timer_fired_once", (57,))


def test_backoff_respected_reports_a_start_before_the_timer_fired() -> None:
    log = upto(history("recovery"), 50)
    confirmed = StopConfirmed(work_id="stuck", attempt=1, epoch=1)
    tampered = forge(log, confirmed, claim_copy(history("recovery"), 53))
    only(check(tampered, "recovery"), "backoff_respected", (50, 52))


def test_lost_retried_only_if_idempotent_reports_the_retry_of_undeclared_work() -> None:
    log = history("recovery")
    submitted = find(log, WorkSubmitted, work_id="lost").position
    tampered = alter(log, submitted, safety="undeclared")
    found = check(tampered, "recovery")
    armed = find(log, RetryArmed, work_id="lost").position
    claim = find(log, AttemptClaimed, work_id="lost", attempt=2).position
    only(found, "lost_retried_only_if_idempotent", (armed - 1, armed), (armed - 1, claim))


def test_no_start_after_terminal_reports_a_claim_of_refused_work() -> None:
    log = history("admission")
    refused = find(log, GateRefused).position
    claim = claim_copy(log, find(log, AttemptClaimed, work_id="gated-ok").position)
    tampered = forge(log, msgspec.structs.replace(claim, work_id="gated-no"))
    only(check(tampered, "admission"), "no_start_after_terminal", (refused, len(log) + 1))


def test_no_start_while_held_reports_a_claim_while_a_gate_holds_the_work() -> None:
    log = history("admission")
    held = 103  # gate.held for gated-ok
    claim = claim_copy(log, find(log, AttemptClaimed, work_id="gated-ok").position)
    tampered = forge(upto(log, 104), claim)
    found = check(tampered, "admission")
    only(found, "no_start_while_held", (held, 105))
    assert "gate by approval" in found[0].message


def test_budget_ledger_balanced_reports_usage_charged_twice() -> None:
    log = history("admission")
    charge = find(log, BudgetCharged, source=78)
    found = check(forge(log, charge.event, stream="budget/ledgers"), "admission")
    only(found, "budget_ledger_balanced", (78, len(log) + 1))
    assert "charged twice" in found[0].message


def test_budget_ledger_balanced_reports_a_start_charged_the_wrong_amount() -> None:
    log = history("admission")
    charge = find(log, BudgetCharged, execution="metered/2")
    wrong = [msgspec.structs.replace(c, amount=2.0) for c in charge.event.charges]  # type: ignore[attr-defined]
    found = check(alter(log, charge.position, charges=wrong), "admission")
    only(found, "budget_ledger_balanced", (charge.position, charge.position + 1))


def test_budget_held_at_max_reports_a_start_past_a_reached_ledger() -> None:
    log = history("admission")
    # Neither hold nor release: metered/3 is then claimed with its ledger at 2 of 2 turns.
    budget_held = find(log, BudgetHeld, work_id="metered").position
    released = find(log, HoldReleased, work_id="metered").position
    filler = InputAccepted(work_id="metered", key="filler")
    tampered = [
        msgspec.structs.replace(r, event=filler) if r.position in (budget_held, released) else r
        for r in log
    ]
    claim = find(log, AttemptClaimed, work_id="metered", attempt=3).position
    found = check(tampered, "admission")
    only(found, "budget_held_at_max", (claim,))
    assert "reached 2 of 2 turns" in found[0].message


def test_delivery_identity_unique_reports_an_identity_given_twice() -> None:
    log = history("recovery")
    tampered = forge(log, InputAccepted(work_id="adopted", key="again"))
    last = tampered[-1]
    tampered[-1] = msgspec.structs.replace(last, delivery_id="input/adopted/submit")
    only(check(tampered, "recovery"), "delivery_identity_unique", (9, last.position))


def test_log_sequence_reports_a_stream_version_given_twice() -> None:
    log = history("recovery")
    tampered = [msgspec.structs.replace(r, version=5) if r.position == 47 else r for r in log]
    found = check(tampered, "recovery")
    assert reported(found) == {"log_sequence"}
    assert [v.positions for v in found] == [(47,), (48,)]


def test_chain_verifies_reports_an_edited_row() -> None:
    pairs = list(rows("recovery"))
    event, row = pairs[19]
    assert row.position == 20 and isinstance(row.data, str)
    pairs[19] = (event, msgspec.structs.replace(row, data=row.data.replace("false", "true")))
    found = Checker(settings("recovery")).observe_all(pairs)
    only(found, "chain_verifies", (20,))


def test_chain_verifies_reports_a_row_that_is_not_the_event() -> None:
    pairs = list(rows("recovery"))
    pairs[4] = (pairs[4][0], pairs[5][1])
    found = Checker(settings("recovery")).observe_all(pairs)
    assert reported(found) == {"chain_verifies"} and found[0].positions == (5,)


def test_relaunch_only_when_nothing_started_reads_the_marker_a_claim_carries() -> None:
    """merged_recovery: adopted/1's claim carries its invoke marker (called, unisolated), so
    relaunching it is reported as relaunching a called launch, as with a separate marker."""
    log = history("merged_recovery")
    claim = find(log, AttemptClaimed, work_id="adopted")
    assert isinstance(claim.event, AttemptClaimed) and claim.event.invoked is not None
    adopted = find(log, AttemptRecovered, work_id="adopted").position
    found = check(alter(log, adopted, mode="relaunch"), "merged_recovery")
    only(found, "relaunch_only_when_nothing_started", (claim.position, adopted))
    assert "called unisolated" in found[0].message


def test_no_input_after_terminal_reports_a_first_input_a_definition_carries() -> None:
    log = history("control")
    cancelled = find(log, WorkCancelled, work_id="doomed").position
    carried = CarriedInput(key="late", payload={"n": 1})
    again = WorkSubmitted(work_id="doomed", scope="root", binding="hang", input=carried)
    found = check(forge(log, again), "control")
    only(found, "no_input_after_terminal", (cancelled, len(log) + 1))
