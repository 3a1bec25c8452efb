"""The ports' small error tree. Drivers' own exceptions never escape an adapter.

- `ConcurrencyConflict`: an expected stream version was stale; nothing was written.
- `DeliveryConflict`: a delivery identity is already recorded with another payload.
- `StoreIntegrityError`: a uniqueness rule of the log refused a raw write.
- `StoreUnavailable`: the store could not be reached or stayed locked; safe to retry.
- `CorruptRecord`: a stored row cannot be decoded (unknown type or version, bad payload).
- `StoreClosed`, `ForkedConnection`: programming errors in how the store is used.
- `ProjectionStoreError`: a projection store could not be opened, read or written.
- `ExecutorError`: an executor could not launch or deliver a control (its text is logged
  by the host, never stored).

These are the errors of the ports (`rota.application.ports`): every adapter raises them.
"""

from __future__ import annotations

from rota.domain.errors import RotaError


class StoreError(RotaError):
    code = "store_error"


class ConcurrencyConflict(StoreError):
    code = "concurrency_conflict"

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, not the expected {expected}; "
            "re-read and decide again"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class DeliveryConflict(StoreError):
    code = "delivery_conflict"

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

    code = "integrity_error"


class StoreUnavailable(StoreError):
    code = "store_unavailable"


class StoreClosed(StoreError):
    code = "store_closed"


class ForkedConnection(StoreError):
    code = "forked_connection"


class CorruptRecord(StoreError):
    code = "corrupt_record"

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        type_: str | None = None,
        type_version: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.position = position
        self.type = type_
        self.type_version = type_version


class ProjectionStoreError(StoreError):
    """A projection store could not be opened, read or written."""

    code = "projection_store"


class ExecutorError(RotaError):
    """An executor could not launch, or refused a control; its text is logged by the host,
    never stored (it may hold output or secrets)."""

    code = "executor_error"
