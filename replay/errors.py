"""Replay's error codes: audit, checkpoints, time travel, doctor, recover-corrupt, export.

The error classes stay beside the code that raises them (`CheckpointError`,
`ExportError`, `RecoveryRefused`, `StoreBusy`); their codes are `ReplayCode` members, and a
code the ports raise too (`backup_exists`, `import_mismatch` ...) is the ports' `PortCode`.
"""

from __future__ import annotations

from rota.domain.errors import ErrorCode


class ReplayCode(ErrorCode):
    """The codes of replay, audit, doctor, recover-corrupt and export/import."""

    # -- the chain and its checkpoints
    INVALID_CHECKPOINT = "invalid_checkpoint"
    """A checkpoint file cannot be read or is not valid, or a directory holds none."""
    CHECKPOINT_OTHER_STORE = "checkpoint_other_store"
    """A checkpoint was written for another store (its store id differs from this log's)."""
    LOG_BEHIND_CHECKPOINT = "log_behind_checkpoint"
    """The log ends before a checkpoint's position: events were truncated or lost."""
    LOG_REWRITTEN = "log_rewritten"
    """The hash at a checkpoint's position differs: the log was rewritten and re-chained."""
    TREE_ROOT_MISMATCH = "tree_root_mismatch"
    """The Merkle root at a checkpoint's size is not the checkpoint's: rows or tree altered."""
    NO_COVERING_CHECKPOINT = "no_covering_checkpoint"
    """No checkpoint with a Merkle root covers that position: run `rota audit checkpoint` first."""
    PROOF_FAILED = "proof_failed"
    """A proof rota made did not verify against its checkpoint: the store or its tree is damaged."""
    UNSIGNED_CHECKPOINT = "unsigned_checkpoint"
    """A checkpoint has no signature but a public key was given to verify it."""
    BAD_SIGNATURE = "bad_signature"
    """A checkpoint's signature is by another key or does not match: the file was altered."""
    SIGNING_UNAVAILABLE = "signing_unavailable"
    """Signing or verifying needs the cryptography package: `pip install 'rota[signing]'`."""

    # -- time travel
    POSITION_OUTSIDE_LOG = "position_outside_log"
    """A replay position beyond the log's head (or negative): pick one in 0..head."""

    # -- doctor and recover-corrupt
    NO_STORE = "no_store"
    """No log file at the path given: check `--store` (nothing is created)."""
    RECOVERY_REFUSED = "recovery_refused"
    """recover-corrupt refused to act; the message says why and nothing was moved."""
    STORE_BUSY = "store_busy"
    """A daemon holds the store (or its lock cannot be taken): stop `rota run` first."""
    LOG_CORRUPT = "log_corrupt"
    """The log itself fails verification: recover-corrupt cannot help, restore from backup."""
    INVALID_BACKUP_NAME = "invalid_backup_name"
    """`--backup-name` is not a plain name (1-128 letters, digits, `.`, `_`, `-`)."""
    PROJECTION_HEALTHY = "projection_healthy"
    """recover-corrupt found the projections healthy (doctor's `projection_integrity` and
    `projection_drift` pass): nothing to recover, nothing was moved. Pass `--force` to
    isolate and rebuild them anyway (docs/runbook-corruption.md)."""

    # -- export and import
    INVALID_EXPORT = "invalid_export"
    """An export file cannot be read as one (the message names the line)."""
    PARTIAL_EXPORT = "partial_export"
    """Importing an export made with `--from`: import a whole-log export instead."""
    STORE_NOT_EMPTY = "store_not_empty"
    """Importing into a store that already holds events: import into an empty store."""
    IMPORT_UNSUPPORTED = "import_unsupported"
    """The target store cannot import yet (the message says why)."""
    IMPORT_INCOMPLETE = "import_incomplete"
    """The store holds an import that was interrupted: run the same `rota import` again
    (it resumes), or remove the store and import into a new one."""
