"""The root of rota's error tree and the domain's typed refusals.

Every error rota raises on purpose derives from `RotaError` and carries a stable `code`
(`lease_lost`, `over_budget`, `concurrency_conflict` ...) that the CLI, the HTTP API and
`doctor` show verbatim, so scripts can match on it while the message stays free to improve.
"""

from __future__ import annotations


class RotaError(Exception):
    """Base of every error rota raises deliberately; `code` is stable, the message is not."""

    code: str = "rota_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class Refusal(RotaError):
    """A decision refused a command: the state does not allow it. Nothing was appended."""

    code = "refused"


class InvalidCommand(Refusal):
    """A command's own content is invalid (a bad id, a malformed status, a negative amount)."""

    code = "invalid_command"


class SchemaError(RotaError):
    """An event could not be encoded or decoded against the current schema."""

    code = "schema_error"


class LeaseLost(Refusal):
    """A write on behalf of an attempt named an epoch that is no longer current.

    The lease expired, was released, or a newer epoch recovered the attempt; the write was
    refused and nothing was appended. A launch running under that lease must stop.
    """

    code = "lease_lost"


class NotEligible(Refusal):
    """The Work cannot start now (nothing pending, running, waiting for a retry, held)."""

    code = "not_eligible"
