"""What a process knows its log held, and the judgement that a log lost some of it (the
`log_regressed` state of issue 32): behind what was seen, or forked from it, with the
missing positions named exactly; nothing when the log extends what was seen."""

from __future__ import annotations

from rota.infrastructure.log_regression import KnownHeads, Regression, judge


def _log(length: int, fork_at: int | None = None) -> dict[int, str]:
    """Hashes of a log of `length` events; from `fork_at` on, another history's."""
    return {
        p: (f"other-{p}" if fork_at is not None and p >= fork_at else f"h-{p}")
        for p in range(1, length + 1)
    }


def _judge(log: dict[int, str], known: KnownHeads) -> Regression | None:
    head = max(log, default=0)
    return judge(head, log.get(head, "genesis"), log.get, known)


def _saw(upto: int, every: int = 1) -> KnownHeads:
    known = KnownHeads()
    for position in range(every, upto + 1, every):
        known.saw(position, f"h-{position}")
    return known


def test_a_log_that_extends_what_was_seen_is_fine() -> None:
    assert _judge(_log(10), _saw(10)) is None
    assert _judge(_log(15), _saw(10)) is None
    assert _judge(_log(0), KnownHeads()) is None


def test_a_log_that_ends_early_names_the_missing_positions() -> None:
    found = _judge(_log(7), _saw(10))
    assert found == Regression(head=7, seen=10)
    assert found.missing == (8, 10)
    assert "positions 8..10 (3 events" in found.describe()
    assert "export --from 7" in found.advice() and "import --append" in found.advice()


def test_a_position_read_without_its_hash_still_counts() -> None:
    known = _saw(5)
    known.saw(9)  # a read reached position 9 (its hash unknown)
    found = _judge(_log(6), known)
    assert found is not None and found.missing == (7, 9)


def test_a_fork_is_found_at_the_first_known_position_that_differs() -> None:
    found = _judge(_log(12, fork_at=8), _saw(10))
    assert found is not None
    assert (found.fork_after, found.differs, found.missing) == (7, 8, (8, 10))
    text = found.describe()
    assert "from position 8 on" in text and "agrees up to position 7" in text
    assert "positions 8..12 were written after they were lost" in text
    assert "reconciled by hand" in found.advice()


def test_a_fork_between_sparse_known_points_is_bounded() -> None:
    known = _saw(20, every=5)  # 5, 10, 15, 20
    found = _judge(_log(20, fork_at=12), known)
    assert found is not None
    assert (found.fork_after, found.differs) == (10, 15)
    assert "from a position in 11..15 on" in found.describe()


def test_a_pinned_checkpoint_is_judged_like_what_was_seen() -> None:
    known = KnownHeads()
    known.pin(30, "h-30")
    assert _judge(_log(30), known) is None
    found = _judge(_log(25), known)
    assert found is not None and found.missing == (26, 30)
    wrong = KnownHeads()
    wrong.pin(20, "not-this-log")
    found = _judge(_log(25), wrong)
    assert found is not None and found.differs == 20 and found.fork_after == 0


def test_only_the_newest_hashes_are_kept_but_the_highest_position_is_not_forgotten() -> None:
    known = KnownHeads(keep=4)
    for position in range(1, 101):
        known.saw(position, f"h-{position}")
    assert [p for p, _ in known.points()] == [97, 98, 99, 100]
    assert known.position == 100
    assert known.hash_at(100) == "h-100" and known.hash_at(1) is None


def test_the_check_costs_one_lookup_when_nothing_was_lost() -> None:
    asked: list[int] = []
    log = _log(50)

    def hash_at(position: int) -> str | None:
        asked.append(position)
        return log.get(position)

    assert judge(50, "h-50", hash_at, _saw(40)) is None
    assert asked == [40]
