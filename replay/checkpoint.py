"""Checkpoints: the log head (position, hash, time) kept outside the store, maybe signed.

The hash chain proves that no row was edited, inserted, reordered or deleted in the middle,
but not that the tail is still there: a log cut back to position N (a lost WAL, a restored
old backup, a forger) is a perfectly valid chain. A checkpoint written earlier to another
place, saying "store S had position P with hash H at time T", reveals it: the log must still
hold position P, with hash H. It also reveals a rewrite that recomputed every later hash.

Files: one note per checkpoint (`checkpoint_note`: the C2SP tlog-checkpoint form, with the
log's Merkle root at that size), `checkpoint-<position:012d>-<store_id>.note`, in a
directory that should live on another disk or machine than the store (copy it off-site). A
file is written atomically (tmp file, fsync, rename, fsync of the directory). The name
carries the store it belongs to, so two stores sharing a directory (the old and the new one
after an import) never overwrite each other's checkpoints; files named by an earlier rota,
`checkpoint-<position:012d>.json`, and the JSON objects an earlier rota wrote
(`checkpoint-<position:012d>-<store_id>.json`, no Merkle root) are still read. Each store
judges only its own (`latest` with `store_id`).

Signing (optional): with an Ed25519 private key (PEM, `rota audit keygen`), a note carries
a signature line over its text (`checkpoint_note`); an old JSON checkpoint's `signature` is
the hex Ed25519 signature of the canonical JSON `{"head_hash":H,"position":P,"store_id":S,
"written_at":T}` (keys sorted, no spaces, UTF-8), and `key_id` the first 16 hex digits of the
SHA-256 of the raw 32-byte public key. Verify with the public key (`--public-key`); a signed
checkpoint stops someone who can write the checkpoint directory but not read the key from
forging a checkpoint that hides a truncation. Needs the `cryptography` package
(`pip install 'rota[signing]'`), imported only when signing or verifying.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from rota.application.ports import Clock, EventStore
from rota.application.timestamps import format_timestamp, parse_timestamp
from rota.domain.errors import DomainCode, RotaError
from rota.infrastructure.atomic_file import atomic_write
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.config import EntryCode
from rota.replay import checkpoint_note as note
from rota.replay.errors import ReplayCode

FILE_RE = re.compile(r"^checkpoint-(\d{12,})(?:-([0-9A-Za-z-]{1,64}))?\.(json|note)$")
STORE_IN_NAME = re.compile(r"^[0-9A-Za-z-]{1,64}$")  # a UUID, as stores make them
HASH_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_FILE = 64 * 1024


class CheckpointError(RotaError):
    code = ReplayCode.INVALID_CHECKPOINT


class Checkpoint(msgspec.Struct, frozen=True):
    """Store `store_id` had `position` with `head_hash` at `written_at` (ISO UTC), and its
    Merkle tree of `position` events had `root` (hex; None in an old JSON checkpoint).
    Signed: `signature` (hex) by `key_id`, and for a note `key_hash` (8 hex)."""

    store_id: str
    position: int
    head_hash: str
    written_at: str
    signature: str | None = None
    key_id: str | None = None
    root: str | None = None
    key_hash: str | None = None

    tree_size = property(lambda self: self.position)  # the tree's size is the position

    def note(self) -> str:
        """The whole note (text, then the signature line if signed); needs `root`."""
        assert self.root is not None
        text = self.message().decode()
        if self.signature is None or self.key_id is None or self.key_hash is None:
            return text
        return f"{text}\n{note.signature_line(self.key_id, self.key_hash, self.signature)}"

    def message(self) -> bytes:
        """The bytes a signature covers: a note's text; for an old JSON checkpoint,
        canonical JSON, keys sorted, no spaces."""
        if self.root is not None:
            return note.note_text(
                self.store_id, self.position, self.root, self.head_hash, self.written_at
            ).encode()
        signed = ("head_hash", "position", "store_id", "written_at")  # sorted
        return msgspec.json.encode({name: getattr(self, name) for name in signed})


def file_name(position: int, store_id: str | None = None, *, kind: str = "note") -> str:
    """The file a checkpoint of `store_id` at `position` is written to (`kind` json: the
    name an earlier rota wrote; without a store, the name before that)."""
    if store_id is None or not STORE_IN_NAME.fullmatch(store_id):
        return f"checkpoint-{position:012d}.json"
    return f"checkpoint-{position:012d}-{store_id}.{kind}"


# -- files -------------------------------------------------------------------------------


def write_file(directory: str | os.PathLike[str], checkpoint: Checkpoint) -> Path:
    """Write one checkpoint file atomically; returns its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    kind = "json" if checkpoint.root is None else "note"
    target = folder / file_name(checkpoint.position, checkpoint.store_id, kind=kind)
    with atomic_write(target, mode=0o644, sync_directory=True) as out:
        if checkpoint.root is None:
            out.write(msgspec.json.encode(checkpoint) + b"\n")
        else:
            out.write(checkpoint.note().encode())
    return target


def from_note(data: bytes, where: object = "the note") -> Checkpoint:
    """A checkpoint from a note's bytes (`CheckpointError` if it is not one)."""
    try:
        fields = note.parse(data)
    except note.NoteError as exc:
        raise CheckpointError(f"{where} is not a valid checkpoint note: {exc}") from None
    checkpoint = Checkpoint(**fields)
    problem = _problem(checkpoint)
    if problem:
        raise CheckpointError(f"{where}: {problem}")
    return checkpoint


def load(path: str | os.PathLike[str]) -> Checkpoint:
    """Read and check one checkpoint file (shape only; see `verify_signature`)."""
    file = Path(path)
    try:
        with file.open("rb") as src:
            data = src.read(MAX_FILE + 1)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {file}: {exc.strerror}") from None
    if len(data) > MAX_FILE:
        raise CheckpointError(f"checkpoint {file} is larger than {MAX_FILE} bytes")
    if file.suffix == ".note" or data.startswith(b"rota/"):
        checkpoint = from_note(data, f"checkpoint {file}")
    else:
        try:
            checkpoint = msgspec.json.decode(data, type=Checkpoint)
        except msgspec.DecodeError as exc:
            raise CheckpointError(f"checkpoint {file} is not a valid checkpoint: {exc}") from None
    problem = _problem(checkpoint)
    if problem:
        raise CheckpointError(f"checkpoint {file}: {problem}")
    named = FILE_RE.fullmatch(file.name)
    if named and int(named.group(1)) != checkpoint.position:
        raise CheckpointError(
            f"checkpoint {file} names position {int(named.group(1))} but holds position "
            f"{checkpoint.position}: the file was renamed or edited"
        )
    if named and named.group(2) is not None and named.group(2) != checkpoint.store_id:
        raise CheckpointError(
            f"checkpoint {file} names store {named.group(2)} but holds store "
            f"{checkpoint.store_id}: the file was renamed or edited"
        )
    return checkpoint


def _problem(checkpoint: Checkpoint) -> str | None:
    if not checkpoint.store_id:
        return "store_id is empty"
    if checkpoint.position < 0:
        return f"position {checkpoint.position} is negative"
    if not HASH_RE.fullmatch(checkpoint.head_hash):
        return "head_hash is not 64 lowercase hex digits"
    try:
        parse_timestamp(checkpoint.written_at)
    except ValueError:
        return f"written_at {checkpoint.written_at!r} is not an ISO-8601 UTC time"
    if (checkpoint.signature is None) != (checkpoint.key_id is None):
        return "signature and key_id must be given together"
    if checkpoint.root is not None and not HASH_RE.fullmatch(checkpoint.root):
        return "root is not 64 lowercase hex digits"
    if checkpoint.root is not None and (checkpoint.key_hash is None) != (checkpoint.key_id is None):
        return "a signed note needs its key hash"
    return None


def paths(directory: str | os.PathLike[str]) -> list[Path]:
    """The checkpoint files of a directory, by position."""
    folder = Path(directory)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint directory {folder} does not exist")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := FILE_RE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def load_all(directory: str | os.PathLike[str]) -> list[Checkpoint]:
    """Every checkpoint of a directory, by position (of every store)."""
    return [load(p) for p in paths(directory)]


def newest_first(
    directory: str | os.PathLike[str], store_id: str | None = None
) -> Iterator[Checkpoint]:
    """The checkpoints of a directory, highest position first (of `store_id` only, if
    given), each file read only when reached: a file named for another store is skipped
    unread; one in the earlier naming is read to learn its store."""
    if not Path(directory).is_dir():
        return
    found = []
    for path in Path(directory).iterdir():
        if m := FILE_RE.fullmatch(path.name):
            found.append((int(m.group(1)), m.group(2) or "", path))
    for _, named, path in sorted(found, reverse=True):
        if store_id is not None and named and named != store_id:
            continue
        checkpoint = load(path)
        if store_id is None or checkpoint.store_id == store_id:
            yield checkpoint


def latest(directory: str | os.PathLike[str], store_id: str | None = None) -> Checkpoint | None:
    """The checkpoint with the highest position (of `store_id` only, if given), or None
    (also for a missing directory)."""
    return next(newest_first(directory, store_id), None)


# -- signing -----------------------------------------------------------------------------


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise RotaError(
            "signing and verifying checkpoints needs the cryptography package: "
            "install rota[signing] (pip install 'rota[signing]')",
            code=ReplayCode.SIGNING_UNAVAILABLE,
        ) from None
    return serialization, ed25519


def _key_error(message: str) -> CheckpointError:
    return CheckpointError(message, code=DomainCode.INVALID_KEY)


def _read_key(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as src:
            return src.read(MAX_FILE)
    except OSError as exc:
        raise _key_error(f"cannot read {what} {path}: {exc.strerror}") from None


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 private key from a PEM file (unencrypted PKCS#8, as keygen writes)."""
    serialization, ed25519 = _ed25519()
    try:
        key = serialization.load_pem_private_key(_read_key(path, "private key"), password=None)
    except (ValueError, TypeError) as exc:
        raise _key_error(f"{path} is not a PEM private key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise _key_error(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 public key from a PEM file (`<key>.pub` as keygen writes)."""
    serialization, ed25519 = _ed25519()
    try:
        key = serialization.load_pem_public_key(_read_key(path, "public key"))
    except (ValueError, TypeError) as exc:
        raise _key_error(f"{path} is not a PEM public key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise _key_error(f"{path} is not an Ed25519 public key")
    return key


def raw_public(public_key: Any) -> bytes:
    serialization, _ = _ed25519()
    raw: bytes = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def key_id(public_key: Any) -> str:
    """The first 16 hex digits of SHA-256 over the raw 32-byte public key."""
    return hashlib.sha256(raw_public(public_key)).hexdigest()[:16]


def sign(checkpoint: Checkpoint, private_key: Any) -> Checkpoint:
    unsigned = msgspec.structs.replace(checkpoint, signature=None, key_id=None, key_hash=None)
    signature = private_key.sign(unsigned.message()).hex()
    public = private_key.public_key()
    ident = key_id(public)
    hashed = None if checkpoint.root is None else note.key_hash(ident, raw_public(public))
    return msgspec.structs.replace(checkpoint, signature=signature, key_id=ident, key_hash=hashed)


def verify_signature(checkpoint: Checkpoint, public_key: Any) -> None:
    """Raise `CheckpointError` unless the checkpoint carries a valid signature of this key."""
    from cryptography.exceptions import InvalidSignature

    where = f"checkpoint at position {checkpoint.position}"
    if checkpoint.signature is None:
        raise CheckpointError(f"{where} is not signed", code=ReplayCode.UNSIGNED_CHECKPOINT)
    expected = key_id(public_key)
    if checkpoint.key_id != expected:
        raise CheckpointError(
            f"{where} was signed by key {checkpoint.key_id}, not by this key ({expected})",
            code=ReplayCode.BAD_SIGNATURE,
        )
    if checkpoint.root is not None and checkpoint.key_hash != note.key_hash(
        expected, raw_public(public_key)
    ):
        raise CheckpointError(
            f"{where}: its key hash is not this key's (the note was altered)",
            code=ReplayCode.BAD_SIGNATURE,
        )
    try:
        public_key.verify(bytes.fromhex(checkpoint.signature), checkpoint.message())
    except (InvalidSignature, ValueError):
        raise CheckpointError(
            f"{where}: the signature does not match its content (the file was altered)",
            code=ReplayCode.BAD_SIGNATURE,
        ) from None


def keygen(out: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Create an Ed25519 key pair: `out` (private, mode 0600) and `out.pub` (public)."""
    serialization, ed25519 = _ed25519()
    private_path = Path(out)
    public_path = Path(f"{private_path}.pub")
    for path in (private_path, public_path):
        if path.exists():
            raise CheckpointError(
                f"{path} already exists; not overwriting a key", code=EntryCode.USAGE
            )
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _create(private_path, private_pem, 0o600)
    _create(public_path, public_pem, 0o644)
    return private_path, public_path


def _create(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(path, mode)  # whatever the umask


# -- the writer --------------------------------------------------------------------------


class Checkpointer:
    """Writes a checkpoint every `every_events` events or `every_seconds` (if the log moved).

    The daemon calls `maybe_write()` once per pass; it costs one head query when there is
    nothing to do. Before writing, it checks that the log still extends the last checkpoint
    this store wrote to the directory and refuses (`CheckpointError`:
    `log_behind_checkpoint` or `log_rewritten`) rather than write one that would paper over
    a lost or rewritten tail. Other stores' checkpoints in the directory (the old store's,
    after an import) are left alone.
    """

    def __init__(
        self,
        store: EventStore,
        directory: str | os.PathLike[str],
        *,
        key_path: str | os.PathLike[str] | None = None,
        every_events: int = 1000,
        every_seconds: float = 300.0,
        clock: Clock | None = None,
    ) -> None:
        if every_events < 1 or every_seconds <= 0:
            raise CheckpointError(
                "every_events must be >= 1 and every_seconds > 0", code=EntryCode.USAGE
            )
        self.store = store
        self.directory = Path(directory)
        self.key = load_private_key(key_path) if key_path is not None else None
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._loaded = False
        self.last: Checkpoint | None = None

    def _last(self) -> Checkpoint | None:
        if not self._loaded:
            self.last = latest(self.directory, self.store.store_id)
            self._loaded = True
        return self.last

    def maybe_write(self) -> Checkpoint | None:
        """Write a checkpoint if one is due; return it, or None."""
        with self._lock:
            last = self._last()
            head = self.store.head()
            if last is None:
                due = head.position > 0
            elif head.position == last.position and head.hash == last.head_hash:
                due = False
            else:
                elapsed = (self.clock.now() - parse_timestamp(last.written_at)).total_seconds()
                due = (
                    head.position - last.position >= self.every_events
                    or elapsed >= self.every_seconds
                    or head.position < last.position
                    or head.position == last.position  # same position, other hash: refuse
                )
            return self._write() if due else None

    def write(self) -> Checkpoint:
        """Write a checkpoint of the current head now."""
        with self._lock:
            self._last()
            return self._write()

    def _write(self) -> Checkpoint:
        from rota.replay.audit import check_extends

        store_id = self.store.store_id
        head = self.store.head()
        if self.last is not None:
            verdict = check_extends(self.store, self.last)
            if verdict is not None:
                code, reason = verdict
                raise CheckpointError(f"{reason} (directory {self.directory})", code=code)
        root = self.store.tree_head(head.position).root.hex()
        checkpoint = Checkpoint(
            store_id, head.position, head.hash, format_timestamp(self.clock.now()), root=root
        )
        if self.key is not None:
            checkpoint = sign(checkpoint, self.key)
        write_file(self.directory, checkpoint)
        self.last = checkpoint
        return checkpoint
