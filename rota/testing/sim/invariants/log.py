"""Invariants of the log itself: delivery identities, positions and stream versions, and
the hash chain (DESIGN.md, "Idempotent delivery" and "Tamper evidence")."""

from __future__ import annotations

from rota.application.ports import RawRecord, RecordedEvent
from rota.infrastructure.chain import GENESIS, link_row
from rota.testing.sim.invariants.base import Invariant, Violation


class LogInvariant(Invariant):
    """An invariant of every row, given the event and its stored row when there is one."""

    def observe_row(self, recorded: RecordedEvent, raw: RawRecord | None) -> list[Violation]:
        return []


class DeliveryIdentityUnique(LogInvariant):
    """A delivery identity names one event: no two events share a `delivery_id`.

    DESIGN.md: "Each transition that can be repeated has a delivery identity
    (`turn/<execution>/<epoch>[/<key>]`, `retry/<work>/<failure-seq>`, ...). Appending an
    identity that is already in the log is a no-op returning the original event." Seed 001
    (001_a97b7b12fa97a199.txt) of a turn: "delivery turn/<execution>/<lease epoch>[/<key>],
    so a repeated transition is a no-op"; seed 000 (000_7093870176ee4035.txt) names
    "unknown tokens double-committed" a stop condition and wants "no fabricated
    deliveries".
    """

    name = "delivery_identity_unique"

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def observe_row(self, recorded: RecordedEvent, raw: RawRecord | None) -> list[Violation]:
        identity = recorded.delivery_id
        if identity is None:
            return []
        first = self.seen.setdefault(identity, recorded.position)
        if first == recorded.position:
            return []
        return [
            self.violation(
                f"delivery identity {identity!r} names two events ({recorded.type} again)",
                first,
                recorded.position,
            )
        ]


class LogSequence(LogInvariant):
    """Positions run 1, 2, 3 with no gap or repeat, and each stream's versions 1, 2, 3.

    DESIGN.md: "Optimistic stream versions make two schedulers racing on one store unable
    to both claim, or to exceed capacity." and "an auditor can prove the log was not
    altered, reordered, truncated in the middle or extended with forged rows"; a stream
    version given twice is two writers that both passed one fence.
    """

    name = "log_sequence"

    def __init__(self) -> None:
        self.position = 0
        self.versions: dict[str, int] = {}

    def observe_row(self, recorded: RecordedEvent, raw: RawRecord | None) -> list[Violation]:
        found: list[Violation] = []
        at = recorded.position
        if at != self.position + 1:
            found.append(
                self.violation(
                    f"position {at} follows position {self.position}",
                    self.position,
                    at,
                )
            )
        self.position = max(self.position, at)
        last = self.versions.get(recorded.stream)
        first_ok = last is None and recorded.version in (0, 1)
        if not first_ok and recorded.version != (last or 0) + 1:
            want = 1 if last is None else last + 1
            found.append(
                self.violation(
                    f"stream {recorded.stream} jumps to version {recorded.version}, expected "
                    f"{want}",
                    at,
                )
            )
        self.versions[recorded.stream] = recorded.version
        return found


class ChainVerifies(LogInvariant):
    """The hash chain verifies event by event: each stored hash links its row to the one
    before, and the stored row is the event observed.

    DESIGN.md: "Each recorded event carries a hash chained to the previous one in log order,
    so an auditor can prove the log was not altered, reordered, truncated in the middle or
    extended with forged rows." The check is `rota.replay.audit.verify_records`' link,
    `rota.infrastructure.chain.link_row`, from the genesis hash; it needs every row from
    position 1 (an event observed without its row ends the chain check there).
    """

    name = "chain_verifies"

    def __init__(self) -> None:
        self.previous: bytes | None = GENESIS
        self.broken = False

    def observe_row(self, recorded: RecordedEvent, raw: RawRecord | None) -> list[Violation]:
        if self.previous is None or self.broken:
            return []
        if raw is None:
            self.previous = None  # no row: nothing later can be linked
            return []
        at = recorded.position
        envelope = (raw.position, raw.stream, raw.version, raw.delivery_id, raw.recorded_at)
        observed = (at, recorded.stream, recorded.version, recorded.delivery_id)
        if envelope[:4] != observed or raw.recorded_at != recorded.recorded_at:
            return [self.violation(f"the row at {raw.position} is not the event at {at}", at)]
        if raw.type != recorded.type:
            return [self.violation(f"row {at} is a {raw.type}, the event a {recorded.type}", at)]
        computed = link_row(self.previous, raw)
        if computed.hex() != raw.hash:
            self.broken = True  # every later link breaks too: reported once
            return [
                self.violation(
                    f"the stored hash of {recorded.type} at {at} does not match its content "
                    "and the previous hash (edited, inserted or moved)",
                    at,
                )
            ]
        self.previous = computed
        return []
