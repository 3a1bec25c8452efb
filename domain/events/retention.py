"""Events of retention: the policies in force, and each prune of old payloads.

A prune removes payloads, never rows: a pruned row keeps its position, stream, version,
type, type_version, delivery identity, recording time and hash, and its payload becomes the
event's summary (the event with its `pruned_fields` at neutral values, marked `$pruned`).
`RetentionPruned` records what was pruned and the Merkle root the pruned rows' hashes lead
to, so `rota audit verify` can tell a pruned row from a tampered one.
"""

from typing import ClassVar

import msgspec

from rota.domain.events.base import Event


class RetentionPolicy(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One `[[retention]]` policy: the Works it covers (by `scope`, the scope or any under
    it, `binding`, and/or the `schedule` that fired them; none of them: every Work), and how
    long after a terminal Work's last event its payloads are kept (`keep_days`). `keep` is
    what stays of each event: its summary (the only choice today)."""

    name: str
    keep_days: float
    scope: str | None = None
    binding: str | None = None
    schedule: str | None = None
    keep: str = "summary"


class PartialPrune(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The part of a Work that goes on (a standing Work) a prune summarized: the outcome and
    recovery rows of its ended `attempts`, and the input rows at `inputs` (positions) that
    only those attempts consumed."""

    work_id: str
    attempts: list[int]
    inputs: list[int] = msgspec.field(default_factory=list)


class RetentionConfigured(Event, tag="core.retention.configured", frozen=True, kw_only=True):
    """The retention policies in force changed (written when the configuration's differ
    from the last recorded ones), so a replay knows the policy a prune applied."""

    stream_pattern: ClassVar[str] = "retention"

    policies: list[RetentionPolicy] = msgspec.field(default_factory=list)


class RetentionPruned(Event, tag="core.retention.pruned", frozen=True, kw_only=True):
    """The payloads of the events at `ranges` (inclusive `[first, last]` position pairs)
    are being replaced by their summaries under `policy`. Written after a checkpoint of
    `tree_size` events whose Merkle root is `root` (hex) and after the original events were
    archived to `archive` (a file name) with SHA-256 `archive_digest`; `events` rows and
    `bytes` of payload become `summary_bytes`, in the ended Works `work_ids` (all their
    events) and the old attempts of the Works in `partial`. The rewrite that follows is
    the only in-place change rota makes to its log; a crash in it resumes at the next run."""

    stream_pattern: ClassVar[str] = "retention"
    delivery_pattern: ClassVar[str | None] = "retention/pruned/<tree size>"

    policy: str
    ranges: list[list[int]]
    tree_size: int
    root: str
    archive: str
    archive_digest: str
    events: int
    bytes: int
    summary_bytes: int = 0
    works: int = 0
    work_ids: list[str] = msgspec.field(default_factory=list)
    partial: list[PartialPrune] = msgspec.field(default_factory=list)


RETENTION_EVENTS = (RetentionConfigured, RetentionPruned)
