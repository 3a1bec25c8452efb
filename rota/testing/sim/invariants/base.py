"""What every invariant shares: the `Violation` it reports and the `Invariant` base class.

An invariant is a small class whose docstring quotes the seed sentence it guards. The
checker hands it each event (in position order) of the types it names in `events`,
together with the `Model` as it stood before that event, and it returns what the event
violates. An invariant may keep state of its own (folded from the events it sees, O(1) a
event); `at_rest` is asked only when the simulation is quiescent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from rota.application.ports import RecordedEvent
from rota.domain.events import Event

if TYPE_CHECKING:
    from rota.testing.sim.invariants.model import Model


@dataclass(frozen=True)
class Violation:
    """One broken guarantee: which invariant, what was wrong (naming the Work or
    execution), and the log positions of the events involved (oldest first)."""

    invariant: str
    message: str
    positions: tuple[int, ...]

    def __str__(self) -> str:
        where = ", ".join(str(p) for p in self.positions)
        return f"{self.invariant}: {self.message} (positions {where})"


class Invariant:
    """A named guarantee checked event by event (see the module docstring)."""

    name: ClassVar[str] = ""
    # The event types `observe` is given (subclasses included); () gives it every event.
    events: ClassVar[tuple[type[Event], ...]] = ()

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        """The violations `recorded` reveals, judged against `model` before it."""
        return []

    def at_rest(self, now: datetime, model: Model) -> list[Violation]:
        """The violations of what must hold once the simulation is quiescent at `now`."""
        return []

    def violation(self, message: str, *positions: int | None) -> Violation:
        """A violation of this invariant at `positions` (unknown ones left out, sorted)."""
        known = sorted({p for p in positions if p is not None and p > 0})
        return Violation(self.name, message, tuple(known))


def summary(invariant: type[Invariant] | Invariant) -> str:
    """The first sentence of an invariant's docstring (its statement, as docs list it)."""
    doc = type(invariant).__doc__ if isinstance(invariant, Invariant) else invariant.__doc__
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def field(event: Event, name: str, default: Any = None) -> Any:
    """An event's field by name (the fenced events share `attempt` and `epoch`)."""
    return getattr(event, name, default)
