"""Personal data: the per-Work keys kept beside the log (never in it), and the cipher that
seals a personal field under one.

`PersonalKeys` is a small table in the store (SQLite, PostgreSQL, memory), apart from the log
and the projections: `rota export` never reads it, no event or projection holds a key, and
destroying a Work's key (`rota forget`) makes every field sealed under it unreadable while
the log, its hash chain and its proofs stay as they were.

`PersonalCipher` seals one value (bytes) under a key with associated data binding it to its
Work and field path, and opens it again. Sealing is deterministic (a synthetic nonce): the
same value of the same field of the same Work seals to the same token, so a retried submit
records the same event (delivery identities compare events) and a derived input key is the
same; equal values of one Work are therefore seen to be equal, nothing more.
"""

from __future__ import annotations

from typing import Protocol


class PersonalKeys(Protocol):
    """The per-Work data keys (32 random bytes each), in the store beside the log.

    Atomicity: `create` commits before it returns (a sealed value is appended only under a
    key that is durable); two callers creating one Work's key at once get the same key.
    `destroy` commits, in the key's place, a mark that the Work's key was destroyed (its id
    only), so the Work never gets another key, even from a submit racing the forget; and it
    removes what the store can of the key's bytes (SQLite: secure delete and a checkpoint of
    its write-ahead log). Errors are the store's (`StoreUnavailable`, `StoreError`); no
    message ever holds a key."""

    def get(self, work_id: str) -> bytes | None:
        """The Work's key, or None when it has none (never created, or destroyed)."""
        ...

    def create(self, work_id: str) -> bytes | None:
        """The Work's key, made (random) and committed when it has none; None when its key
        was destroyed (it never gets another)."""
        ...

    def destroy(self, work_id: str) -> bool:
        """Destroy the Work's key for ever (and bar a new one); False when it had none."""
        ...


class PersonalCipher(Protocol):
    """Authenticated encryption of one personal value (AES-256-GCM in the adapter)."""

    def seal(self, key: bytes, context: bytes, plaintext: bytes) -> str:
        """The token of `plaintext` (text: base64 of nonce and ciphertext), bound to
        `context` (associated data); the same inputs give the same token."""
        ...

    def open(self, key: bytes, context: bytes, token: str) -> bytes:
        """The plaintext of `token`; raises `ValueError` when it does not open (a changed
        token, another key or context). The message never holds the key or a value."""
        ...


__all__ = ["PersonalCipher", "PersonalKeys"]
