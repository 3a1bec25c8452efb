"""The ports' small error tree. Drivers' own exceptions never escape an adapter.

- `ConcurrencyConflict`: an expected stream version was stale; nothing was written.
- `DeliveryConflict`: a delivery identity is already recorded with another payload.
- `StoreIntegrityError`: a uniqueness rule of the log refused a raw write.
- `StoreUnavailable`: the store could not be reached or stayed locked; safe to retry.
  `StoreReadOnly` (one of them): the server answers but takes no writes (a demoted primary).
- `LogRegressed`: the log lost events this process saw or a checkpoint recorded (a
  failover to a replica that lacked them); nothing is written until they are restored.
- `CorruptRecord`: a stored row cannot be decoded (unknown type or version, bad payload).
- `StoreClosed`, `ForkedConnection`: programming errors in how the store is used.
- `ProjectionStoreError`: a projection store could not be opened, read or written.
- `ExecutorError`: an executor could not launch or deliver a control (its text is logged
  by the host, never stored).
- `InvalidExecutorConfig`: an executor refused a binding's config, at a field; retrying
  cannot cure it (a launch refused so fails permanently, `invalid_config`).

These are the errors of the ports (`rota.application.ports`): every adapter raises them.
Their codes are `PortCode` members (docs/errors.md lists them).
"""

from __future__ import annotations

import re

from rota.domain.errors import DomainCode, ErrorCode, RotaError
from rota.domain.failures import FailureCode
from rota.domain.results import Result


class PortCode(ErrorCode):
    """The ports' codes: what the event store, projection stores and executors raise
    (whichever adapter implements them), and the application's own refusals."""

    # -- the event store
    STORE_ERROR = "store_error"
    """The store failed in a way no more precise code names: read the message."""
    CONCURRENCY_CONFLICT = "concurrency_conflict"
    """A stream moved past the expected version; nothing was written: re-read and decide again."""
    DELIVERY_CONFLICT = "delivery_conflict"
    """A delivery identity is already recorded with another event; an identity names one event."""
    INTEGRITY_ERROR = "integrity_error"
    """A uniqueness rule of the log refused a raw write (a stream version or identity taken)."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The store could not be reached or stayed locked; nothing was written: safe to retry."""
    STORE_READ_ONLY = "store_read_only"
    """The server answers but takes no writes (a demoted primary, a replica, read-only mode):
    nothing was written; rota drops its connections to it and reconnects with backoff."""
    LOG_REGRESSED = "log_regressed"
    """The log no longer holds events this process saw or a checkpoint recorded (a failover
    to a replica that lacked them): nothing is written until they are restored; the message
    names the missing positions and how (docs/postgresql.md, "When a failover lost events")."""
    STORE_CLOSED = "store_closed"
    """The store was used after it was closed: a programming error."""
    FORKED_CONNECTION = "forked_connection"
    """A store opened before `fork()` was used in the child: open a new one there."""
    CORRUPT_RECORD = "corrupt_record"
    """A stored row cannot be decoded: run `rota doctor`."""
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    """A stored event has a type this rota does not know: a newer rota wrote it, or damage."""
    UNKNOWN_EVENT_VERSION = "unknown_event_version"
    """A stored event has a newer schema version than this rota knows: upgrade rota."""
    IMPORT_MISMATCH = "import_mismatch"
    """Imported rows do not continue the log (position or hash): import the right export."""
    INVALID_STORE_URL = "invalid_store_url"
    """A store URL has an unknown scheme or names no file: sqlite:///relative, sqlite:////absolute."""
    INVALID_SETTING = "invalid_setting"
    """A store setting is out of range (`synchronous` is one of normal, full, extra)."""
    INVALID_IDENTIFIER = "invalid_identifier"
    """A PostgreSQL schema or table name is not a plain lower-case SQL identifier."""
    SCHEMA_TOO_NEW = "schema_too_new"
    """The store was written by a newer rota (a newer store schema): upgrade rota."""
    STORE_NOT_FOUND = "store_not_found"
    """No rota store where the URL points: reading never creates one (submit, run, import do)."""
    NOT_A_ROTA_STORE = "not_a_rota_store"
    """The file is an SQLite database of another program: rota refuses to take it over."""
    STORE_URL_MOVED = "store_url_moved"
    """`sqlite:///x` is now relative and names no file, but `/x` exists: write `sqlite:////x`."""
    TREE_SIZE = "tree_size"
    """A Merkle tree size or position is outside the log (0 < position <= size <= head)."""
    TREE_NODE_MISSING = "tree_node_missing"
    """A stored Merkle node the proof needs is missing or unreadable: run `rota audit verify`."""
    MISSING_EXTRA = "missing_extra"
    """A postgresql:// store needs the PostgreSQL extra: install 'rota[postgresql]'."""

    # -- projection stores
    PROJECTION_STORE = "projection_store"
    """A projection store could not be opened, read or written: the log is unaffected."""
    NO_PROJECTION_STORE = "no_projection_store"
    """No stored projections where they were looked for: `rota replay rebuild` creates them."""
    PROJECTION_AHEAD = "projection_ahead"
    """A stored projection is past the log's head: it is not this log's; rebuild it."""
    PROJECTION_MOVED = "projection_moved"
    """Another writer rewrote a stored projection meanwhile: reopen the projection store."""
    WRITER_LOCK_LOST = "writer_lock_lost"
    """The projections' writer lock was lost with its connection: reopen the store."""
    READ_ONLY = "read_only"
    """A write to a store that was opened read-only."""
    BACKUP_EXISTS = "backup_exists"
    """A recovery backup of that name exists already: choose a new `--backup-name`."""
    UNSAFE_PATH = "unsafe_path"
    """A path to isolate or create is a symlink or not a regular file or directory."""
    COPY_FAILED = "copy_failed"
    """An isolated copy differs from its source, so the source was kept: check the disk."""
    NOT_SQLITE = "not_sqlite"
    """`--projections FILE` with a PostgreSQL log: its projections live in the log's schema."""

    # -- executors, bindings and executions
    EXECUTOR_ERROR = "executor_error"
    """An executor could not launch or deliver a control; its text is logged, never stored."""
    INTERRUPTED = "interrupted"
    """The cancel reason an in-process attempt sees when it was interrupted."""
    FAILED = "failed"
    """The class default of `rota.Fail`; a callable raising it names its own code instead."""
    SCHEDULE_RUNNER = "schedule_runner"
    """The schedule runner gave up on a tick after its retries; the message names the
    schedule and the tick phase, the cause chain the store error (the next pass tries again)."""
    UNKNOWN_BINDING = "unknown_binding"
    """The Work's binding is not configured: configure or register it (the Work waits)."""
    PERSONAL_UNAVAILABLE = "personal_unavailable"
    """An input marks personal fields but the cryptography package is missing: `pip install
    'rota[signing]'`."""
    PERSONAL_FORGOTTEN = "personal_forgotten"
    """The Work's personal data was forgotten (`rota forget`): it accepts no new personal
    input; submit another Work."""
    PERSONAL_UNREADABLE = "personal_unreadable"
    """A sealed personal value does not open under its Work's key: the ciphertext was changed
    or the key is not the one it was sealed with (`rota audit verify` tells a changed log)."""
    PERSONAL_UNSEALED = "personal_unsealed"
    """An input reached the log's writer with personal fields still in the clear (a submit path
    that does not seal them); nothing was written."""
    UNKNOWN_GRANT = "unknown_grant"
    """A Work opts into a binding grant this scheduler does not define: define it in the
    config's `[[grants]]` (or `Scheduler.grant`) or submit without it."""
    """The binding is not defined in this process and no scheduler on the store has served
    it: a submit is refused (check the name; register it, e.g. `rota run --app`, first). As
    a *Waiting* reason: the Work's binding is served elsewhere, not here (the Work waits)."""
    UNKNOWN_EXECUTOR = "unknown_executor"
    """The binding names an executor that is not registered: register it (submit refuses it)."""
    UNKNOWN_EXECUTION = "unknown_execution"
    """A name that is not an execution id (`<work>/<attempt>`)."""

    # -- operator requests
    INVALID_REQUEST_ID = "invalid_request_id"
    """A request id (`Idempotency-Key`, `request_id`, `--request-id`) does not match
    [A-Za-z0-9._:@/-]{1,200}: use letters, digits and . _ : @ / - only."""
    REQUEST_ID_REUSED = "request_id_reused"
    """A request id is recorded for another request (operation, target or arguments): an
    id names one request forever; send a new one."""


class StoreError(RotaError):
    code = PortCode.STORE_ERROR


class ConcurrencyConflict(StoreError):
    code = PortCode.CONCURRENCY_CONFLICT

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, not the expected {expected}; "
            "re-read and decide again"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class DeliveryConflict(StoreError):
    code = PortCode.DELIVERY_CONFLICT

    def __init__(self, delivery_id: str, position: int | None) -> None:
        where = f"recorded at position {position}" if position else "used earlier in this append"
        super().__init__(
            f"delivery identity {delivery_id!r} is already {where} "
            "with a different event; an identity names one event forever"
        )
        self.delivery_id = delivery_id
        self.position = position


class StoreIntegrityError(StoreError):
    """A uniqueness rule of the log refused a write (a stream version or identity taken)."""

    code = PortCode.INTEGRITY_ERROR


class StoreUnavailable(StoreError):
    code = PortCode.STORE_UNAVAILABLE


# The codes of a store that takes no writes now (a failover): nothing was written.
UNWRITABLE = frozenset(
    {PortCode.STORE_UNAVAILABLE, PortCode.STORE_READ_ONLY, PortCode.LOG_REGRESSED}
)


class StoreReadOnly(StoreUnavailable):
    """The server answers but is read-only or recovering; safe to retry elsewhere."""

    code = PortCode.STORE_READ_ONLY


class LogRegressed(StoreError):
    """The log is behind, or forks from, what this process saw or a checkpoint recorded.

    `head` is the log's head now; `missing` the first and last positions it lacks of that
    history (acknowledged events), `fork_after` the last position known to agree when
    the log holds other events in their place (None: it only ends early)."""

    code = PortCode.LOG_REGRESSED

    def __init__(
        self,
        message: str,
        *,
        head: int,
        missing: tuple[int, int],
        fork_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.head = head
        self.missing = missing
        self.fork_after = fork_after


class StoreClosed(StoreError):
    code = PortCode.STORE_CLOSED


class ForkedConnection(StoreError):
    code = PortCode.FORKED_CONNECTION


class CorruptRecord(StoreError):
    code = PortCode.CORRUPT_RECORD

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        type_: str | None = None,
        type_version: int | None = None,
        code: ErrorCode | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.position = position
        self.type = type_
        self.type_version = type_version


class ProjectionStoreError(StoreError):
    """A projection store could not be opened, read or written."""

    code = PortCode.PROJECTION_STORE


class ExecutorError(RotaError):
    """An executor could not launch, or refused a control; its text is logged by the host,
    never stored (it may hold output or secrets)."""

    code: ErrorCode | str = PortCode.EXECUTOR_ERROR


class InvalidExecutorConfig(ExecutorError):
    """An executor refused a binding's config: `field` is where in it ("" for the whole
    config), `problem` what is wrong. Trying again cannot cure it: raised by
    `Executor.validate_config` it refuses the binding before any Work is accepted for it,
    and raised by `launch` it fails the attempt permanently (`invalid_config`, no retry).
    """

    code = DomainCode.INVALID_CONFIG

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(self.at("config"))

    def at(self, where: str) -> str:
        """The problem under the binding's own path: `bindings[0].command: must be ...`."""
        return f"{where}.{self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"

    def failure(self, executor: str) -> Result:
        """The permanent failure a launch refused so records. It names the field only: the
        problem is the executor's text, which the host logs and never stores."""
        field = self.field if _FIELD.fullmatch(self.field) else ""
        where = f"config.{field}" if field else "config"
        return Result(
            outcome="failed",
            error_code=FailureCode.INVALID_CONFIG,
            error_message=f"executor {executor!r} refused the binding's {where}: fix the "
            "binding, then retry the Work",
            permanent=True,
        )


_FIELD = re.compile(r"^[A-Za-z0-9_.\[\]-]{1,64}$")  # a field path, nothing an executor made up
