"""rota: an execution scheduler whose only source of truth is an append-only event log."""

from rota.domain.errors import InvalidCommand, Refusal, RotaError, SchemaError
from rota.infrastructure.errors import (
    ConcurrencyConflict,
    CorruptRecord,
    DeliveryConflict,
    StoreError,
    StoreUnavailable,
)

__version__ = "0.1.0"

__all__ = [
    "ConcurrencyConflict",
    "CorruptRecord",
    "DeliveryConflict",
    "InvalidCommand",
    "Refusal",
    "RotaError",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "__version__",
]
