"""Schedule commands: define, pause, resume, remove, trigger now, backfill, and the fires.

Every command decides on the schedules projection (`rota.projections.schedules_projection`, kept in
step with the log by the transaction loop) and appends through the one loop, fenced by the
expected version of the schedule's stream `schedule/<name>`. A fire appends
`core.schedule.fired` and the input it creates for the schedule's standing Work in ONE
append: the input key is the fire's delivery identity `schedule/<name>/<nominal UTC>`, so
a fire never exists without its input and never happens twice, whoever decides it. The
Work is `schedule.<name>@<binding>` (standing, trigger `first`: one run per input), so a
fire made under one binding keeps it when the schedule is redefined; `allow_all` makes a
run-once Work per fire instead. Before a definition changes (redefine, pause, resume,
remove), the nominal times due under the old one are accounted for in the same append.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from rota.application.commands import requests
from rota.application.configuration import Configuration
from rota.application.ports import AppendResult, RecordedEvent
from rota.application.schedule_fires import Fires, work_fences
from rota.application.timestamps import schedule_fold_time
from rota.application.transactions import Transactions
from rota.domain.emit import Emit
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events.schedule import (
    ScheduleDefined,
    SchedulePaused,
    ScheduleRemoved,
    ScheduleResumed,
)
from rota.domain.flow import check_keys, check_priority
from rota.domain.personal import refuse_in_template
from rota.domain.results import check_payload
from rota.domain.schedule_plans import (
    Fire,
    Plan,
)
from rota.domain.schedule_specs import (
    EPOCH,
    SPEC_FORMAT,
    Spec,
    SpecError,
    check_name,
    define,
    fire_identity,
    manual_identity,
    parse_duration,
    rfc3339,
    times_between,
)
from rota.projections.schedules_projection import (
    CONFIG_SOURCE,
    ScheduleRow,
    SchedulesProjection,
    schedule_stream,
)

CATCHUPS = ("none", "latest", "all")
OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_other", "allow_all")
MAX_BACKFILL = 1000
Decided = tuple[list[Emit], dict[str, int]]


class ScheduleCommands:
    """The schedule commands over one transaction loop and configuration."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config
        self._projection: SchedulesProjection | None = None
        self.fires = Fires(tx, config)
        # Every batch the loop applies follows into the projection once it is folded.
        tx.followers.append(self._follow)

    @property
    def projection(self) -> SchedulesProjection:
        """The schedules projection, folded on first use from the schedule streams alone
        (`EventStore.read_prefix`), up to the scheduler projection's position."""
        if self._projection is None:
            with self.tx.lock:
                if self._projection is None:
                    self._projection = self._fold()
        return self._projection

    def _fold(self) -> SchedulesProjection:
        projection = SchedulesProjection()
        upto = self.tx.projection.position
        after = 0
        while True:
            batch = self.tx.store.read_prefix("schedule", after, 5000, upto)
            if not batch:
                break
            for r in batch:
                projection.apply(r.position, r.stream, r.version, schedule_fold_time(r), r.event)
            after = batch[-1].position
        projection.position = max(projection.position, upto)
        return projection

    def _follow(self, recorded: Sequence[RecordedEvent]) -> None:
        if self._projection is None:
            return  # folded from the log when first used
        projection = self._projection
        apply = projection.apply
        for r in recorded:
            # Only the schedule streams (`schedule/<name>`, `schedules/leader`) fold into it;
            # `apply` tells them apart, the rest only move its position (done once, below).
            if r.stream.startswith("schedule"):
                apply(r.position, r.stream, r.version, schedule_fold_time(r), r.event)
        if recorded:
            projection.position = max(projection.position, recorded[-1].position)

    # -- definitions ------------------------------------------------------------------

    def define(
        self,
        name: str,
        *,
        actor: str = "api",
        reason: str = "",
        source: str = "api",
        **definition: Any,
    ) -> int:
        """Define or redefine a schedule (validated here: `definition_fields` takes the
        keywords); returns its version. The same definition from the same `source`
        (`config` or `api`) again is a no-op."""
        fields = definition_fields(name, **definition)
        refuse_in_template(name, fields["input"], self.config.personal.get(fields["binding"], ()))
        version: list[int] = [0]

        def decide() -> Decided:
            now = self.tx.now()
            row = self.projection.get(name)
            resolved = with_anchor(fields, row)
            if row is not None and unchanged(row, resolved, source):
                version[0] = row.definition.schedule_version
                return [], {}
            emits = self._settle(row, now) if row is not None else []
            version[0] = row.definition.schedule_version + 1 if row is not None else 1
            event = ScheduleDefined(
                schedule_version=version[0],
                since=now,
                actor=actor,
                reason=reason,
                source=source,
                **resolved,
            )
            emits.append(Emit(schedule_stream(name), event))
            fences = work_fences(emits, self.tx.projection.works)
            return emits, {schedule_stream(name): self._stream_version(name, row), **fences}

        self.tx.transact(decide)
        return version[0]

    def prune(self, keep: Collection[str], *, actor: str = CONFIG_SOURCE, reason: str) -> list[str]:
        """Remove, in one append, every schedule a config defined (`source` `config`) whose
        name is not in `keep` (the config's `[[schedules]]`): `core.schedule.removed` each,
        after settling what was due. Schedules defined through the API are never pruned.
        Returns the names removed, sorted."""
        removed: list[str] = []

        def decide() -> Decided:
            now = self.tx.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            removed.clear()
            for row in sorted(self.projection.active(), key=lambda r: r.name):
                if row.source != CONFIG_SOURCE or row.name in keep:
                    continue
                removed.append(row.name)
                emits.extend(self._settle(row, now))
                event = ScheduleRemoved(
                    name=row.name,
                    schedule_version=row.definition.schedule_version,
                    actor=actor,
                    reason=reason,
                )
                emits.append(Emit(schedule_stream(row.name), event))
                expected[schedule_stream(row.name)] = row.stream_version
            if not emits:
                return [], {}
            return emits, {**expected, **work_fences(emits, self.tx.projection.works)}

        self.tx.transact(decide)
        return list(removed)

    def _stream_version(self, name: str, row: ScheduleRow | None) -> int:
        if row is not None:
            return row.stream_version
        removed = self.projection.schedules.get(name)
        return removed.stream_version if removed is not None else 0

    def pause(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self._change(name, "pause", actor, reason)

    def resume(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self._change(name, "resume", actor, reason)

    def remove(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self._change(name, "remove", actor, reason)

    def _change(self, name: str, what: str, actor: str, reason: str) -> None:
        def decide() -> Decided:
            now = self.tx.now()
            row = self.row(name)
            version = row.definition.schedule_version
            emits = self._settle(row, now)
            if what == "pause":
                if row.paused:
                    return [], {}
                event: Any = SchedulePaused(
                    name=name, schedule_version=version, actor=actor, reason=reason
                )
            elif what == "resume":
                if not row.paused and row.quarantined is None:
                    return [], {}
                event = ScheduleResumed(
                    name=name, schedule_version=version, since=now, actor=actor, reason=reason
                )
            else:
                event = ScheduleRemoved(
                    name=name, schedule_version=version, actor=actor, reason=reason
                )
            emits.append(Emit(schedule_stream(name), event))
            fences = work_fences(emits, self.tx.projection.works)
            return emits, {schedule_stream(name): row.stream_version, **fences}

        self.tx.transact(decide)

    def row(self, name: str) -> ScheduleRow:
        row = self.projection.get(name)
        if row is None:
            raise Refusal(f"no schedule {name!r}", code=DomainCode.UNKNOWN_SCHEDULE)
        return row

    def _settle(self, row: ScheduleRow, now: datetime) -> list[Emit]:
        """Account for the nominal times due under the current definition (as a tick)."""
        if not row.active:
            return []
        try:
            emits, _ = self.tick_emits(row, now)
        except SpecError:
            return []  # the runner quarantines it; a redefinition replaces it anyway
        return emits

    # -- fires ------------------------------------------------------------------------

    # -- fires (rota.application.schedule_fires builds them) --------------------------

    def read_spec(self, row: ScheduleRow) -> Spec:
        return self.fires.read_spec(row)

    def tick_emits(self, row: ScheduleRow, now: datetime) -> tuple[list[Emit], Plan]:
        return self.fires.tick_emits(row, now)

    def quarantine_emit(self, row: ScheduleRow, reason: str, now: datetime) -> Emit:
        return self.fires.quarantine_emit(row, reason, now)

    def fire_emits(
        self, d: ScheduleDefined, fire: Fire, identity: str, **options: Any
    ) -> list[Emit]:
        return self.fires.fire_emits(d, fire, identity, **options)

    def trigger_now(
        self,
        name: str,
        *,
        key: str | None = None,
        actor: str = "api",
        request_id: str | None = None,
    ) -> RecordedEvent | None:
        """Fire now, outside the nominal times (`schedule/<name>/manual/<key>`), recording
        who asked (`actor`); None when that key fired already. With a `request_id` (the
        fire's key), a repeat answers with the first fire (`trigger_request`)."""
        result = self.trigger_request(name, key=key, actor=actor, request_id=request_id)
        return result.recorded[0] if result.written else None

    def trigger_request(
        self,
        name: str,
        *,
        key: str | None = None,
        actor: str = "api",
        request_id: str | None = None,
    ) -> AppendResult:
        """`trigger_now`'s append: the fire (new), or the recorded one under a request id
        (`written` 0); without a request id a key that fired already records nothing."""
        if request_id is not None:
            key = requests.request_key(request_id, key, "a trigger's request id is its key")
        asked = requests.Asked(
            "trigger", ("core.schedule.fired",), name, {"actor": actor}, target_field="name"
        )
        found: list[RecordedEvent] = []

        def decide() -> Decided:
            found.clear()
            row = self.row(name)
            now = self.tx.now()
            identity = manual_identity(name, key or rfc3339(now))
            recorded = self.tx.store.find_delivery(identity)
            if request_id is not None:
                requests.other_request(self.tx, request_id, asked)
                if recorded is not None:
                    asked.check(request_id, recorded)
                    found.append(recorded)
            if recorded is not None:
                return [], {}  # this key fired already
            emits = self.fire_emits(
                row.definition, Fire(now, now), identity, manual=True, actor=actor
            )
            return emits, work_fences(emits, self.tx.projection.works)

        result = self.tx.transact(decide)
        return AppendResult(found, 0) if found else result

    def backfill(self, name: str, start: datetime, end: datetime) -> tuple[int, int]:
        """Fire every nominal time in [start, end] (end not after now) with the live
        identities; returns (fired, already fired). Times fired before are no-ops."""
        counts = [0, 0]

        def decide() -> Decided:
            row = self.row(name)
            now = self.tx.now()
            if end > now:
                raise SpecError(
                    "a backfill ends at or before now", code=DomainCode.INVALID_SCHEDULE
                )
            spec = self.read_spec(row)
            times = times_between(
                spec,
                row.definition.anchor,
                start - timedelta(microseconds=1),
                end,
                MAX_BACKFILL + 1,
            )
            if len(times) > MAX_BACKFILL:
                raise SpecError(
                    f"a backfill fires at most {MAX_BACKFILL} times",
                    code=DomainCode.INVALID_SCHEDULE,
                )
            emits: list[Emit] = []
            counts[:] = [0, 0]
            created: set[str] = set()
            for nominal in times:
                identity = fire_identity(name, nominal)
                if self.tx.store.find_delivery(identity) is not None:
                    counts[1] += 1
                    continue
                counts[0] += 1
                emits.extend(
                    self.fire_emits(
                        row.definition,
                        Fire(nominal, nominal),
                        identity,
                        backfill=True,
                        created=created,
                    )
                )
            return emits, work_fences(emits, self.tx.projection.works)

        self.tx.transact(decide)
        return counts[0], counts[1]


def definition_fields(
    name: str,
    *,
    binding: str,
    every: str | None = None,
    cron: str | None = None,
    offset: str | None = None,
    timezone: str = "UTC",
    input: Any = None,
    scope: str = "root",
    catchup: str = "latest",
    catchup_window: str | int = "1h",
    max_catchup: int = 100,
    overlap: str = "skip",
    jitter: str | int = 0,
    anchor: datetime | None = None,
    priority: int = 0,
    keys: Sequence[str] = (),
) -> dict[str, Any]:
    """Validate a definition (`invalid_schedule`, `unknown_timezone`); the fields of its
    `core.schedule.defined` but the version, times, actor and source (`anchor` None: the
    current definition's, else the Unix epoch: `with_anchor`)."""
    check_name(name)
    spec = define(every=every, cron=cron, offset=offset, timezone=timezone)
    if catchup not in CATCHUPS:
        raise SpecError(
            f"catchup must be one of {', '.join(CATCHUPS)}", code=DomainCode.INVALID_SCHEDULE
        )
    if overlap not in OVERLAPS:
        raise SpecError(
            f"overlap must be one of {', '.join(OVERLAPS)}", code=DomainCode.INVALID_SCHEDULE
        )
    if not 1 <= max_catchup <= 10_000:
        raise SpecError("max_catchup must be 1..10000", code=DomainCode.INVALID_SCHEDULE)
    window = _seconds(catchup_window, "catchup_window")
    spread = _seconds(jitter, "jitter")
    check_payload(input, "schedule input")
    if isinstance(keys, str):  # a lone key is refused, not read as its characters
        raise InvalidCommand("keys must be a list of keys", code=DomainCode.INVALID_FLOW)
    return {
        "name": name,
        "spec": spec.text,
        "timezone": spec.timezone,
        "binding": binding,
        "scope": scope,
        "input": input,
        "catchup": catchup,
        "catchup_window_seconds": window,
        "max_catchup": max_catchup,
        "overlap": overlap,
        "jitter_seconds": spread,
        "anchor": anchor,
        "spec_format": SPEC_FORMAT,
        "priority": check_priority(priority),
        "keys": list(check_keys(keys)),
    }


def with_anchor(fields: dict[str, Any], row: ScheduleRow | None) -> dict[str, Any]:
    """`fields` with an anchor: the given one, else the current definition's, else EPOCH."""
    if fields["anchor"] is not None:
        return fields
    return {**fields, "anchor": row.definition.anchor if row is not None else EPOCH}


def unchanged(row: ScheduleRow, fields: dict[str, Any], source: str) -> bool:
    """Whether defining `fields` (anchored) from `source` would change nothing: the same
    definition, from the same source, of a schedule that is not removed or quarantined."""
    return row.active and row.source == source and _same(row.definition, fields)


def _same(d: ScheduleDefined, fields: dict[str, Any]) -> bool:
    return all(getattr(d, k) == v for k, v in fields.items())


def _seconds(value: str | int, what: str) -> int:
    if isinstance(value, int):
        if value < 0:
            raise SpecError(f"{what} must be >= 0", code=DomainCode.INVALID_SCHEDULE)
        return value
    return parse_duration(value, what)
