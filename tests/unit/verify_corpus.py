"""An independent reference for rota.verify's tests, and the corpus of forged proofs.

The reference is written from the specifications, not from rota/verify.py: RFC 9162 2.1's
MTH, PATH and PROOF (recursive, as the RFC states them), C2SP signed notes signed with
`cryptography`'s Ed25519, and events chained by rota's own `infrastructure/chain.py`. The
corpus (`CORPUS`) is data: each case names a forgery, builds it from a valid proof, and says
the reason (a regular expression) the verifier must refuse it with.
"""

# The corpus is a table, one case a line: long lines on purpose.
# ruff: noqa: E501
from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rota.infrastructure.chain import GENESIS, canonical_envelope, link

ORIGIN = "rota/2fc0c611-a8cc-48a4-970e-e77e3f6f7fc2"
OTHER_ORIGIN = "rota/0b7d7d0e-5a43-4a1f-9d37-8a9bbf6f3f11"
TIME = "2026-12-07T22:00:00.123456Z"


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- RFC 9162 2.1, as the RFC states it ---------------------------------------------------


class Tree:
    """MTH, PATH and PROOF over a list of leaf data (here: the events' chain hashes)."""

    def __init__(self, data: list[bytes]) -> None:
        self.data = data
        self.mth = cache(self._mth)

    @staticmethod
    def split(n: int) -> int:
        """The largest power of two smaller than n (n > 1)."""
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    def _mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n == 0:
            return sha256(b"")
        if n == 1:
            return sha256(b"\x00" + self.data[lo])
        k = self.split(n)
        return sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi))

    def root(self, size: int) -> bytes:
        return self.mth(0, size)

    def path(self, m: int, size: int, lo: int = 0) -> list[bytes]:
        """PATH(m, D[lo:lo+size])."""
        if size <= 1:
            return []
        k = self.split(size)
        if m < k:
            return [*self.path(m, k, lo), self.mth(lo + k, lo + size)]
        return [*self.path(m - k, size - k, lo + k), self.mth(lo, lo + k)]

    def proof(self, m: int, size: int) -> list[bytes]:
        """PROOF(m, D[size]) = SUBPROOF(m, D[size], true)."""
        return self._subproof(m, 0, size, True)

    def _subproof(self, m: int, lo: int, size: int, whole: bool) -> list[bytes]:
        if m == size:
            return [] if whole else [self.mth(lo, lo + size)]
        k = self.split(size)
        if m <= k:
            return [*self._subproof(m, lo, k, whole), self.mth(lo + k, lo + size)]
        return [*self._subproof(m - k, lo + k, size - k, False), self.mth(lo, lo + k)]


# -- keys and signed notes (C2SP signed-note, tlog-checkpoint) -----------------------------


@dataclass(frozen=True)
class Key:
    private: Ed25519PrivateKey
    raw: bytes
    name: str
    key_hash: bytes

    @classmethod
    def from_seed(cls, seed: int) -> Key:
        private = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
        raw = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        name = "rota-" + hashlib.sha256(raw).hexdigest()[:16]
        return cls(private, raw, name, sha256(name.encode() + b"\n\x01" + raw)[:4])

    @property
    def pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def vkey(self) -> str:
        encoded = b64(b"\x01" + self.raw)
        return f"{self.name}+{self.key_hash.hex()}+{encoded}"

    def line(self, text: str) -> str:
        """The signature line of this key over a note's text."""
        return f"\u2014 {self.name} {b64(self.key_hash + self.private.sign(text.encode()))}\n"


KEY = Key.from_seed(1)
OTHER_KEY = Key.from_seed(2)


def note_text(origin: str, size: int, root: bytes, head: str, time: str = TIME) -> str:
    return f"{origin}\n{size}\n{b64(root)}\nhead {head}\ntime {time}\n"


def sign(text: str, *keys: Key) -> str:
    if not keys:
        return text
    return text + "\n" + "".join(key.line(text) for key in keys)


# -- a log of events, chained by rota's own code -------------------------------------------


class Log:
    """`size` events chained as rota chains them, with proofs of them as rota's are shaped."""

    def __init__(self, size: int, origin: str = ORIGIN, salt: str = "") -> None:
        self.origin = origin
        self.envelopes: list[bytes] = []
        self.hashes: list[bytes] = []  # hashes[p - 1] is the chain hash at position p
        previous = GENESIS
        for position in range(1, size + 1):
            envelope = canonical_envelope(
                position,
                f"work/{position % 3}",
                position // 3 + 1,
                "core.test.event",
                1,
                None if position % 2 else f"turn/{position}",
                f"2026-12-07T21:{position % 60:02d}:00.000000Z",
                json.dumps({"n": position, "salt": salt, "text": "caf\u00e9"}),
            )
            previous = link(previous, envelope)
            self.envelopes.append(envelope)
            self.hashes.append(previous)
        self.tree = Tree(self.hashes)

    def head(self, size: int) -> str:
        return self.hashes[size - 1].hex() if size else "0" * 64

    def note(self, size: int, *keys: Key, time: str = TIME) -> str:
        text = note_text(self.origin, size, self.tree.root(size), self.head(size), time)
        return sign(text, *keys) if keys else sign(text, KEY)

    def inclusion(self, position: int, size: int, note: str | None = None) -> dict[str, Any]:
        return {
            "format": "rota-inclusion/1",
            "position": position,
            "tree_size": size,
            "previous_hash": self.head(position - 1),
            "envelope": b64(self.envelopes[position - 1]),
            "event_hash": self.hashes[position - 1].hex(),
            "path": [h.hex() for h in self.tree.path(position - 1, size)],
            "checkpoint": self.note(size) if note is None else note,
        }

    def consistency(self, old: int, new: int) -> dict[str, Any]:
        return {
            "format": "rota-consistency/1",
            "old_size": old,
            "new_size": new,
            "path": [h.hex() for h in self.tree.proof(old, new)],
            "old_checkpoint": self.note(old),
            "new_checkpoint": self.note(new),
        }


# -- the corpus of forgeries ---------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A forged proof: `make()` builds it, the verifier must refuse it with `reason`."""

    name: str
    kind: str  # "inclusion" or "consistency"
    make: Callable[[], Any]  # a dict, or the JSON text itself
    reason: str  # a regular expression the refusal's message must contain
    key: Any = KEY.pem
    allow_unsigned: bool = False


LOG = Log(13)
FORK = Log(13, salt="rewritten")  # the same origin, another history: a split view
P, N, M = 5, 13, 6  # the inclusion proof's position and size; the consistency proof's old size


def proof(**changes: Any) -> dict[str, Any]:
    """The valid inclusion proof of position P in tree N, with `changes`."""
    found = LOG.inclusion(P, N)
    found.update(changes)
    return found


def consistency(**changes: Any) -> dict[str, Any]:
    """The valid consistency proof from M to N, with `changes`."""
    found = LOG.consistency(M, N)
    found.update(changes)
    return found


def flip(hex_hash: str, at: int = 0) -> str:
    """The hash with one bit flipped."""
    data = bytearray(bytes.fromhex(hex_hash))
    data[at] ^= 1
    return data.hex()


def rehashed(envelope: bytes, previous: str | None = None, **changes: Any) -> dict[str, Any]:
    """Proof of P with another envelope whose event_hash was recomputed to match it."""
    previous = LOG.head(P - 1) if previous is None else previous
    event_hash = sha256(bytes.fromhex(previous) + envelope).hex()
    return proof(envelope=b64(envelope), previous_hash=previous, event_hash=event_hash, **changes)


def edit_header(index: int, value: Any) -> bytes:
    """Envelope P with one header field replaced (still canonical JSON)."""
    header, _, payload = LOG.envelopes[P - 1].partition(b"\n")
    fields = json.loads(header)
    fields[index] = value
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" + payload


def note_lines(note: str, edit: Callable[[list[str]], list[str]]) -> str:
    """A note with its lines (split on "\\n", the last one empty) edited, not re-signed."""
    return "\n".join(edit(note.split("\n")))


def with_line(index: int, value: str) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        return [*lines[:index], value, *lines[index + 1 :]]

    return edit


def signature_line(name: str, key_hash: bytes, signature: bytes) -> str:
    return f"\u2014 {name} {b64(key_hash + signature)}\n"


TEXT = note_text(ORIGIN, N, LOG.tree.root(N), LOG.head(N))
SIGNATURE = KEY.private.sign(TEXT.encode())
OLD_NOTE = LOG.note(M)


def json_text(found: dict[str, Any]) -> str:
    return json.dumps(found)


def inclusion_cases() -> list[Case]:
    i = "inclusion"
    path = proof()["path"]
    return [
        Case("forged first path hash", i, lambda: proof(path=[flip(path[0]), *path[1:]]), "does not lead from the event"),
        Case("forged last path hash", i, lambda: proof(path=[*path[:-1], flip(path[-1], 31)]), "does not lead from the event"),
        Case("path hashes swapped", i, lambda: proof(path=[path[1], path[0], *path[2:]]), "does not lead from the event"),
        Case("neighbour's event under this position", i, lambda: LOG.inclusion(P + 1, N) | {"position": P, "path": path}, "the envelope is of position 6, not 5"),
        Case("neighbour's event and position, this path", i, lambda: LOG.inclusion(P + 1, N) | {"path": path}, "does not lead from the event"),
        Case("swapped leaves: this event, the neighbour's path", i, lambda: proof(path=LOG.inclusion(P + 1, N)["path"]), "does not lead from the event"),
        Case("position one later", i, lambda: proof(position=P + 1), "the envelope is of position 5, not 6"),
        Case("position one earlier", i, lambda: proof(position=P - 1), "the envelope is of position 5, not 4"),
        Case("position 0", i, lambda: proof(position=0), r"position 0 is not in 1\.\.13"),
        Case("position beyond the tree", i, lambda: proof(position=N + 1), r"position 14 is not in 1\.\.13"),
        Case("tree size bigger than the checkpoint's", i, lambda: proof(tree_size=N + 1), r"tree_size 14 is not the checkpoint's \(13\)"),
        Case("tree size smaller than the checkpoint's", i, lambda: proof(tree_size=N - 1), r"tree_size 12 is not the checkpoint's"),
        Case("tree size 0", i, lambda: proof(tree_size=0), r"tree_size 0 is not the checkpoint's"),
        Case("tree size negative", i, lambda: proof(tree_size=-13), "tree_size is not an integer"),
        Case("tree size a bool", i, lambda: proof(tree_size=True), "tree_size is not an integer"),
        Case("position a bool", i, lambda: proof(position=True), "position is not an integer"),
        Case("tree size a float", i, lambda: proof(tree_size=13.0), "tree_size is not an integer"),
        Case("tree size a string", i, lambda: proof(tree_size="13"), "tree_size is not an integer"),
        Case("tree size NaN", i, lambda: json_text(proof()).replace('"tree_size": 13', '"tree_size": NaN'), "tree_size is not an integer"),
        Case("tree size 2^64", i, lambda: proof(tree_size=2**64), "tree_size is not an integer"),
        Case("truncated path", i, lambda: proof(path=path[1:]), "the path has 3 hashes; index 4 of 13 needs 4"),
        Case("extended path", i, lambda: proof(path=[*path, "0" * 64]), "the path has 5 hashes; index 4 of 13 needs 4"),
        Case("empty path", i, lambda: proof(path=[]), "the path has 0 hashes"),
        Case("path longer than 64", i, lambda: proof(path=["0" * 64] * 65), "at most 64 hashes"),
        Case("path for another tree size", i, lambda: proof(path=LOG.inclusion(P, 8)["path"]), "the path has 3 hashes"),
        Case("path for another tree size, same length", i, lambda: proof(path=LOG.inclusion(P, 12)["path"]), "does not lead from the event"),
        Case("path of a forked history", i, lambda: proof(path=FORK.inclusion(P, N)["path"]), "does not lead from the event"),
        Case("payload edited", i, lambda: proof(envelope=b64(LOG.envelopes[P - 1].replace(b'"n": 5', b'"n": 7'))), r"event_hash is not SHA-256\(previous_hash \|\| envelope\)"),
        Case("payload edited and rehashed", i, lambda: rehashed(LOG.envelopes[P - 1] + b" "), "does not lead from the event"),
        Case("header stream edited", i, lambda: proof(envelope=b64(edit_header(1, "work/9"))), "event_hash is not SHA-256"),
        Case("header stream edited and rehashed", i, lambda: rehashed(edit_header(1, "work/9")), "does not lead from the event"),
        Case("previous_hash edited", i, lambda: proof(previous_hash=flip(LOG.head(P - 1))), "event_hash is not SHA-256"),
        Case("event_hash edited", i, lambda: proof(event_hash=flip(LOG.head(P))), "event_hash is not SHA-256"),
        Case("envelope position differs, rehashed", i, lambda: rehashed(edit_header(0, P + 1)), "the envelope is of position 6, not 5"),
        Case("envelope position a string, rehashed", i, lambda: rehashed(edit_header(0, str(P))), "7-field header line"),
        Case("envelope version a bool, rehashed", i, lambda: rehashed(edit_header(2, True)), "7-field header line"),
        Case("envelope without a header line", i, lambda: rehashed(b'[5,"work/2",2]'), "7-field header line"),
        Case("envelope header with 8 fields", i, lambda: rehashed(b'[5,"a",1,"t",1,null,"r",0]\n{}'), "7-field header line"),
        Case("envelope not base64", i, lambda: proof(envelope="not base64!"), "envelope is not canonical standard base64"),
        Case("envelope base64 without padding", i, lambda: proof(envelope="Cg"), "envelope is not canonical"),
        Case("envelope base64 with non-zero pad bits", i, lambda: proof(envelope="Ch=="), "envelope is not canonical"),
        Case("envelope not a string", i, lambda: proof(envelope=123), "envelope is not canonical"),
        Case("first event with a non-zero previous hash", i, lambda: LOG.inclusion(1, N) | {"previous_hash": "11" * 32}, "previous_hash at position 1 must be 64 zeros"),
        Case("event at the tree size is not the signed head", i, lambda: LOG.inclusion(N, N) | {"checkpoint": sign(note_text(ORIGIN, N, LOG.tree.root(N), LOG.head(N - 1)), KEY)}, "not the checkpoint's head"),
        Case("root from another size, re-signed", i, lambda: proof(checkpoint=sign(note_text(ORIGIN, N, LOG.tree.root(N - 1), LOG.head(N)), KEY)), "does not lead from the event"),
        Case("checkpoint signed by another key", i, lambda: proof(checkpoint=LOG.note(N, OTHER_KEY)), f"not signed by {KEY.name} \\(only by {OTHER_KEY.name}\\)"),
        Case("checkpoint time altered after signing", i, lambda: proof(checkpoint=note_lines(LOG.note(N), with_line(4, "time 2026-12-07T23:00:00.123456Z"))), "does not match the checkpoint's text"),
        Case("checkpoint root altered after signing", i, lambda: proof(checkpoint=note_lines(LOG.note(N), with_line(2, b64(LOG.tree.root(N - 1))))), "does not match the checkpoint's text"),
        Case("checkpoint size and root of another tree, old signature", i, lambda: proof(tree_size=N - 1, checkpoint=note_text(ORIGIN, N - 1, LOG.tree.root(N - 1), LOG.head(N - 1)) + "\n" + KEY.line(TEXT)), "does not match the checkpoint's text"),
        Case("signature by the key under another name", i, lambda: proof(checkpoint=TEXT + "\n" + signature_line("rota-0000000000000000", KEY.key_hash, SIGNATURE)), f"has {KEY.name}'s key hash but names rota-0000000000000000"),
        Case("signature under the key's name with another key hash", i, lambda: proof(checkpoint=TEXT + "\n" + signature_line(KEY.name, b"\x00\x00\x00\x00", SIGNATURE)), f"the signature named {KEY.name} has another key's key hash"),
        Case("signature line repeated", i, lambda: proof(checkpoint=LOG.note(N) + KEY.line(TEXT)), "2 signature lines for"),
        Case("signature cut short", i, lambda: proof(checkpoint=TEXT + "\n" + signature_line(KEY.name, KEY.key_hash, SIGNATURE[:63])), "does not match the checkpoint's text"),
        Case("signature with a hyphen for the em dash", i, lambda: proof(checkpoint=LOG.note(N).replace("\u2014", "-")), "line 7 of the checkpoint is not '— <name> <signature>'"),
        Case("signature line naming a key with a control character", i, lambda: proof(checkpoint=LOG.note(N) + signature_line("evil\x1b[2J", b"\x00" * 4, SIGNATURE)), "line 8 of the checkpoint is not '— <name> <signature>'"),
        Case("unsigned checkpoint", i, lambda: proof(checkpoint=TEXT), "the checkpoint is not signed"),
        Case("unsigned checkpoint with its empty line", i, lambda: proof(checkpoint=TEXT + "\n"), "empty line but no signature"),
        Case("no key and no allow_unsigned", i, proof, "no key was given", key=None),
        Case("extra note line (an extension line)", i, lambda: proof(checkpoint=sign(TEXT + "extension\n", KEY)), "sixth line of text"),
        Case("note without its trailing newline", i, lambda: proof(checkpoint=LOG.note(N)[:-1]), "does not end with a newline"),
        Case("note with trailing garbage", i, lambda: proof(checkpoint=LOG.note(N) + "garbage\n"), "line 8 of the checkpoint is not"),
        Case("note with CRLF line ends", i, lambda: proof(checkpoint=LOG.note(N).replace("\n", "\r\n")), "line 1 of the checkpoint"),
        Case("note root not base64", i, lambda: proof(checkpoint=sign(TEXT.replace(b64(LOG.tree.root(N)), "!" * 44), KEY)), r"root \(line 3\) is not canonical standard base64"),
        Case("note root without padding", i, lambda: proof(checkpoint=sign(TEXT.replace(b64(LOG.tree.root(N)), b64(LOG.tree.root(N)).rstrip("=")), KEY)), r"root \(line 3\) is not canonical"),
        Case("note size with a leading zero", i, lambda: proof(checkpoint=sign(TEXT.replace("\n13\n", "\n013\n"), KEY)), "line 2 of the checkpoint is not a tree size"),
        Case("note head in uppercase hex", i, lambda: proof(checkpoint=sign(TEXT.replace(LOG.head(N), LOG.head(N).upper()), KEY)), "line 4 of the checkpoint"),
        Case("note time without microseconds", i, lambda: proof(checkpoint=sign(TEXT.replace(TIME, "2026-12-07T22:00:00Z"), KEY)), "line 5 of the checkpoint"),
        Case("note origin of another system", i, lambda: proof(checkpoint=sign(TEXT.replace(ORIGIN, "example.com/log"), KEY)), "line 1 of the checkpoint is not 'rota/<store id>'"),
        Case("checkpoint not a string", i, lambda: proof(checkpoint=[TEXT]), "the checkpoint is not a string"),
        Case("checkpoint longer than 64 KiB", i, lambda: proof(checkpoint=LOG.note(N) + ("\u2014 x AAAAAAAA\n" * 6000)), "the checkpoint is not a string of at most 65536"),
        Case("note of four lines", i, lambda: proof(checkpoint=TEXT.rsplit("time", 1)[0]), "the checkpoint has 4 lines, not 5"),
        Case("note root of 31 bytes", i, lambda: proof(checkpoint=sign(TEXT.replace(b64(LOG.tree.root(N)), b64(LOG.tree.root(N)[:31])), KEY)), r"root \(line 3\) is not 32 bytes"),
        Case("empty tree's note with a head", i, lambda: proof(checkpoint=sign(note_text(ORIGIN, 0, sha256(b""), LOG.head(1)), KEY)), "an empty tree's checkpoint must have the empty root and a zero head"),
        Case("empty tree's note with a root", i, lambda: proof(checkpoint=sign(note_text(ORIGIN, 0, LOG.tree.root(1), "0" * 64), KEY)), "an empty tree's checkpoint must have the empty root"),
        Case("signature line too short to hold a key hash", i, lambda: proof(checkpoint=LOG.note(N) + "\u2014 other AAAA\n"), "the signature on line 8 is too short"),
        Case("duplicate JSON key", i, lambda: json_text(proof())[:-1] + ', "position": 6}', "repeats a key"),
        Case("unknown JSON key", i, lambda: proof(comment="trust me"), "unknown keys: 'comment'"),
        Case("missing JSON key", i, lambda: {k: v for k, v in proof().items() if k != "path"}, "lacks keys: path"),
        Case("other format", i, lambda: proof(format="rota-inclusion/2"), "of format 'rota-inclusion/1'"),
        Case("a consistency proof given as inclusion", i, consistency, "of format 'rota-inclusion/1'"),
        Case("not a JSON object", i, lambda: json.dumps([proof()]), "not a JSON object"),
        Case("JSON nested 100,000 deep", i, lambda: "[" * 100_000, "not strict UTF-8 JSON"),
        Case("JSON bytes not UTF-8", i, lambda: json_text(proof()).encode().replace(b"inclusion", b"incl\xffusion"), "not strict UTF-8 JSON"),
        Case("JSON with a byte order mark", i, lambda: "\ufeff" + json_text(proof()), "not strict UTF-8 JSON"),
        Case("envelope header not UTF-8, rehashed", i, lambda: rehashed(LOG.envelopes[P - 1].replace(b"work/2", b"work/\xff")), "7-field header line"),
        Case("trailing garbage after the JSON", i, lambda: json_text(proof()) + " {}", "not strict UTF-8 JSON: Extra data"),
        Case("uppercase hex event_hash", i, lambda: proof(event_hash=LOG.head(P).upper()), "event_hash is not 64 lowercase hex digits"),
        Case("uppercase hex in the path", i, lambda: proof(path=[path[0].upper(), *path[1:]]), r"path\[0\] is not 64 lowercase hex digits"),
        Case("short hex previous_hash", i, lambda: proof(previous_hash=LOG.head(P - 1)[:62]), "previous_hash is not 64 lowercase hex digits"),
        Case("path item not a string", i, lambda: proof(path=[7, *path[1:]]), r"path\[0\] is not 64"),
        Case("path not a list", i, lambda: proof(path=",".join(path)), "path is not a list"),
    ]  # fmt: skip


def consistency_cases() -> list[Case]:
    c = "consistency"
    path = consistency()["path"]
    short = f"the path has {len(path) - 1} hashes; 6 to 13 needs {len(path)}"
    return [
        Case("old size larger than new (notes swapped too)", c, lambda: consistency(old_size=N, new_size=M, old_checkpoint=LOG.note(N), new_checkpoint=OLD_NOTE), "old_size 13 is larger than new_size 6"),
        Case("old size 0", c, lambda: consistency(old_size=0, path=[], old_checkpoint=LOG.note(0)), "old_size is 0"),
        Case("old size bigger than its note's", c, lambda: consistency(old_size=M + 1), r"sizes 7, 13 are not the checkpoints' sizes"),
        Case("the older tree presented as the newer", c, lambda: consistency(new_checkpoint=LOG.note(M + 2)), r"sizes 6, 13 are not the checkpoints' sizes"),
        Case("a proof to an older tree, sizes restated", c, lambda: LOG.consistency(M, M + 2) | {"new_size": N, "new_checkpoint": LOG.note(N)}, short),
        Case("different origins", c, lambda: consistency(new_checkpoint=Log(N, origin=OTHER_ORIGIN).note(N)), "different logs"),
        Case("a forked history (split view)", c, lambda: consistency(old_checkpoint=FORK.note(M)), "does not lead to the old checkpoint's root"),
        Case("a forked history, its own proof", c, lambda: FORK.consistency(M, N) | {"new_checkpoint": LOG.note(N)}, "does not lead to the (old|new) checkpoint's root"),
        Case("forged first hash", c, lambda: consistency(path=[flip(path[0]), *path[1:]]), "does not lead to the (old|new) checkpoint's root"),
        Case("forged last hash", c, lambda: consistency(path=[*path[:-1], flip(path[-1])]), "does not lead to the new checkpoint's root"),
        Case("truncated path", c, lambda: consistency(path=path[1:]), short),
        Case("extended path", c, lambda: consistency(path=[*path, path[0]]), f"the path has {len(path) + 1} hashes; 6 to 13 needs {len(path)}"),
        Case("equal sizes with a path", c, lambda: LOG.consistency(N, N) | {"path": [path[0]]}, "equal sizes need an empty path"),
        Case("equal sizes, another root, same head", c, lambda: LOG.consistency(N, N) | {"new_checkpoint": sign(note_text(ORIGIN, N, FORK.tree.root(N), LOG.head(N)), KEY)}, "equal sizes need an empty path and equal roots"),
        Case("equal sizes, another head", c, lambda: LOG.consistency(N, N) | {"new_checkpoint": FORK.note(N)}, "same size have different heads"),
        Case("roots swapped between the notes, re-signed", c, lambda: consistency(old_checkpoint=sign(note_text(ORIGIN, M, LOG.tree.root(N), LOG.head(M)), KEY), new_checkpoint=sign(note_text(ORIGIN, N, LOG.tree.root(M), LOG.head(N)), KEY)), "does not lead to the old checkpoint's root"),
        Case("old note signed by another key", c, lambda: consistency(old_checkpoint=LOG.note(M, OTHER_KEY)), "not signed by"),
        Case("new note unsigned", c, lambda: consistency(new_checkpoint=note_text(ORIGIN, N, LOG.tree.root(N), LOG.head(N))), "the checkpoint is not signed"),
        Case("new note's root altered after signing", c, lambda: consistency(new_checkpoint=note_lines(LOG.note(N), with_line(2, b64(LOG.tree.root(M))))), "does not match the checkpoint's text"),
        Case("new size a bool", c, lambda: consistency(new_size=True), "new_size is not an integer"),
        Case("duplicate JSON key", c, lambda: json_text(consistency())[:-1] + ', "old_size": 13}', "repeats a key"),
        Case("unknown JSON key", c, lambda: consistency(proof=[]), "unknown keys: 'proof'"),
        Case("an inclusion proof given as consistency", c, proof, "of format 'rota-consistency/1'"),
    ]  # fmt: skip


CORPUS: list[Case] = inclusion_cases() + consistency_cases()
