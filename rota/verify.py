"""Check rota's Merkle proofs with nothing but the proof, the signed checkpoint and a key.

Standalone: it imports nothing of rota (the standard library; `cryptography` only to check an
Ed25519 signature), so an auditor can review it in one sitting and run a copy of this file
alone: `python verify.py inclusion PROOF.json --key KEY.pub`. The formats in full are in
docs/auditor.md, "Proofs without the log". In short: leaf = SHA-256(0x00 || 32-byte chain
hash of the event at position P) at index P-1, node = SHA-256(0x01 || left || right), RFC
9162's MTH, PATH and PROOF checked as its 2.1.3.2 and 2.1.4.2 say; a checkpoint is a C2SP
signed note of five lines (`rota/<store id>`, tree size, base64 root, `head <hex>`, `time
<ISO UTC>`), an empty line and `— rota-<key id> <base64(key hash || signature)>` lines; a
proof is a JSON object (`rota-inclusion/1` with the event's canonical envelope, or
`rota-consistency/1` with two checkpoints). Every refusal raises `VerificationError` with a
one-line reason (never key material); nothing is accepted leniently.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

MAX_PATH = 64
MAX_SIZE = 2**63 - 1
MAX_NOTE = 64 * 1024
SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")  # DER before an Ed25519 key (RFC 8410)

_HEX = re.compile(r"[0-9a-f]{64}")
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")
_ORIGIN = re.compile(r"rota/[0-9A-Za-z-]{1,64}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_NAME = r"[!-*,-~]+"  # a key name: printable ASCII but space and "+", so messages stay plain
_SIGNATURE = re.compile(rf"\u2014 ({_NAME}) (\S+)")
_VKEY = re.compile(rf"({_NAME})\+([0-9a-f]{{8}})\+(\S+)")


class VerifyCode(StrEnum):
    """The standalone verifier's codes (`rota.verify`, which imports nothing of rota)."""

    PROOF_REFUSED = "proof_refused"
    """A proof, checkpoint or key failed verification (the message says what; trust nothing
    it claims), or no signature could be checked without `pip install 'rota[signing]'`."""


class VerificationError(ValueError):
    """A refusal: the proof, checkpoint or key is not what it must be (one-line reason)."""

    code = VerifyCode.PROOF_REFUSED


@dataclass(frozen=True)
class Signature:
    name: str
    key_hash: bytes
    signature: bytes


@dataclass(frozen=True)
class PublicKey:
    name: str
    key_hash: bytes
    raw: bytes


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint note's content; `verified_by` names the key whose signature was checked."""

    origin: str
    tree_size: int
    root: bytes
    head: str
    time: str
    signatures: tuple[Signature, ...]
    text: str  # the five lines the signatures cover
    verified_by: str | None = None


@dataclass(frozen=True)
class VerifiedEvent:
    """An event proven to be at `position` of the tree its checkpoint signs."""

    position: int
    tree_size: int
    origin: str
    stream: str
    version: int
    type: str
    type_version: int
    delivery_id: str | None
    recorded_at: str
    payload: bytes
    event_hash: str
    checkpoint: Checkpoint


_refuse = VerificationError  # a short name for the many refusals below


# -- hashes (RFC 9162 2.1) ---------------------------------------------------------------
def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(index: int, size: int) -> tuple[int, int]:
    """How PATH(index, D[size]) decomposes: (hashes below the split, hashes beside it)."""
    inner = (index ^ (size - 1)).bit_length()
    return inner, (index >> inner).bit_count()


def root_from_inclusion_path(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """The root that `path`, exactly RFC 9162's PATH(index, D[size]), leads to from `leaf`."""
    if not 0 <= index < size:
        raise _refuse(f"leaf index {index} is outside a tree of size {size}")
    if len(path) != (needed := sum(_split(index, size))):
        raise _refuse(f"the path has {len(path)} hashes; index {index} of {size} needs {needed}")
    fn, sn, r = index, size - 1, leaf  # RFC 9162 2.1.3.2 (its "sn is 0" cannot happen now)
    for p in path:
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r


def check_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, path: list[bytes]
) -> None:
    """Refuse unless `path` (RFC 9162 PROOF) shows tree `new_size` extends tree `old_size`."""
    if old_size == 0:
        raise _refuse("old_size is 0: every tree extends the empty tree, nothing to prove")
    if old_size > new_size:
        raise _refuse(f"old_size {old_size} is larger than new_size {new_size}")
    if old_size == new_size:
        if path or old_root != new_root:
            raise _refuse("equal sizes need an empty path and equal roots")
        return
    inner, border = _split(old_size - 1, new_size)
    shift = (old_size & -old_size).bit_length() - 1  # PROOF starts at a subtree of 2^shift
    exact = old_size == 1 << shift
    needed = inner - shift + border + (0 if exact else 1)
    if len(path) != needed:
        raise _refuse(f"the path has {len(path)} hashes; {old_size} to {new_size} needs {needed}")
    path = [old_root, *path] if exact else path  # RFC 9162 2.1.4.2
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if fr != old_root:
        raise _refuse("the path does not lead to the old checkpoint's root")
    if sr != new_root:
        raise _refuse("the path does not lead to the new checkpoint's root")


# -- checkpoints (C2SP tlog-checkpoint in a signed note) and keys ------------------------
def _b64(text: str, what: str) -> bytes:
    """Strict standard base64 with padding: its one canonical spelling, nothing else."""
    try:
        canonical = isinstance(text, str) and _B64.fullmatch(text)
        data = base64.b64decode(text, validate=True) if canonical else None
    except (binascii.Error, ValueError):
        data = None
    if not data or base64.b64encode(data).decode() != text:
        raise _refuse(f"{what} is not canonical standard base64")
    return data


def parse_checkpoint(note: str) -> Checkpoint:
    """The checkpoint a note states (its form only: `verify_checkpoint` checks signatures)."""
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise _refuse(f"the checkpoint is not a string of at most {MAX_NOTE} characters")
    if not note.endswith("\n"):
        raise _refuse("the checkpoint does not end with a newline")
    lines = note[:-1].split("\n")
    if len(lines) < 5:
        raise _refuse(f"the checkpoint has {len(lines)} lines, not 5 before its signatures")
    origin, size, root, head, time = lines[:5]
    if not _ORIGIN.fullmatch(origin):
        raise _refuse("line 1 of the checkpoint is not 'rota/<store id>'")
    if not _SIZE.fullmatch(size) or int(size) > MAX_SIZE:
        raise _refuse("line 2 of the checkpoint is not a tree size (decimal, no leading zero)")
    if len(raw_root := _b64(root, "the checkpoint's root (line 3)")) != 32:
        raise _refuse("the checkpoint's root (line 3) is not 32 bytes")
    if not (head.startswith("head ") and _HEX.fullmatch(head[5:])):
        raise _refuse("line 4 of the checkpoint is not 'head <64 lowercase hex digits>'")
    if not (time.startswith("time ") and _TIME.fullmatch(time[5:])):
        raise _refuse("line 5 of the checkpoint is not 'time <YYYY-MM-DDTHH:MM:SS.ffffffZ>'")
    if size == "0" and (raw_root != hashlib.sha256(b"").digest() or head[5:] != "0" * 64):
        raise _refuse("an empty tree's checkpoint must have the empty root and a zero head")
    if len(lines) > 5 and lines[5] != "":
        raise _refuse("the checkpoint has a sixth line of text (it has exactly 5)")
    if len(lines) == 6:
        raise _refuse("the checkpoint has the empty line but no signature line after it")
    signatures = []
    for number, line in enumerate(lines[6:], start=7):
        if not (found := _SIGNATURE.fullmatch(line)):
            raise _refuse(f"line {number} of the checkpoint is not '— <name> <signature>'")
        blob = _b64(found.group(2), f"the signature on line {number}")
        if len(blob) < 5:
            raise _refuse(f"the signature on line {number} is too short")
        signatures.append(Signature(found.group(1), blob[:4], blob[4:]))
    text = "".join(line + "\n" for line in lines[:5])
    return Checkpoint(origin, int(size), raw_root, head[5:], time[5:], tuple(signatures), text)


def load_key(key: Any) -> PublicKey:
    """A verifier key: PEM (bytes, str or a file), raw 32 bytes, or a C2SP vkey (or file)."""
    if isinstance(key, bytes) and len(key) == 32:
        return _public_key(key)
    if isinstance(key, os.PathLike) or (
        isinstance(key, str) and "-----BEGIN" not in key and not _VKEY.fullmatch(key)
    ):
        try:
            with open(key, "rb") as src:
                key = src.read(MAX_NOTE)
        except OSError as error:
            raise _refuse(f"cannot read the key file: {error.strerror}") from None
    text = (key.decode("ascii", "replace") if isinstance(key, bytes) else str(key)).strip()
    if vkey := _VKEY.fullmatch(text):
        blob = _b64(vkey.group(3), "the vkey's key")
        if len(blob) != 33 or blob[0] != 1:
            raise _refuse("the vkey is not an Ed25519 key (0x01 and 32 bytes)")
        found = _public_key(blob[1:])
        if vkey.group(1) != found.name or vkey.group(2) != found.key_hash.hex():
            raise _refuse(f"the vkey's name or key hash is not its key's ({found.name})")
        return found
    lines = [line.strip() for line in text.splitlines()] or [""]
    if lines[0] != "-----BEGIN PUBLIC KEY-----" or lines[-1] != "-----END PUBLIC KEY-----":
        raise _refuse("the key is neither a PEM public key, a vkey, nor 32 raw bytes")
    der = _b64("".join(lines[1:-1]), "the PEM key")
    if len(der) != 44 or not der.startswith(SPKI_PREFIX):
        raise _refuse("the PEM key is not an Ed25519 public key")
    return _public_key(der[12:])


def _public_key(raw: bytes) -> PublicKey:
    name = "rota-" + hashlib.sha256(raw).hexdigest()[:16]
    return PublicKey(name, hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4], raw)


def _signed(key: PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise _refuse("checking a signature needs: pip install 'rota[signing]'") from None
    try:
        Ed25519PublicKey.from_public_bytes(key.raw).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def verify_checkpoint(note: str, key: Any, *, allow_unsigned: bool = False) -> Checkpoint:
    """The checkpoint, once its note is well formed and signed by `key`. An unsigned note (or
    no key) passes only with `allow_unsigned=True`, and then `verified_by` is None."""
    checkpoint = parse_checkpoint(note)
    if key is None or not checkpoint.signatures:
        if not allow_unsigned:
            what = "no key was given" if key is None else "the checkpoint is not signed"
            raise _refuse(f"{what} (pass allow_unsigned / --allow-unsigned to accept that)")
        return checkpoint
    public = key if isinstance(key, PublicKey) else load_key(key)
    mine = (public.name, public.key_hash)
    lines = [s for s in checkpoint.signatures if s.name == mine[0] or s.key_hash == mine[1]]
    if not lines:
        names = ", ".join(sorted({s.name for s in checkpoint.signatures}))
        raise _refuse(f"the checkpoint is not signed by {public.name} (only by {names})")
    if len(lines) > 1:
        raise _refuse(f"the checkpoint has {len(lines)} signature lines for {public.name}")
    if lines[0].name != public.name:
        raise _refuse(f"a signature has {public.name}'s key hash but names {lines[0].name}")
    if lines[0].key_hash != public.key_hash:
        raise _refuse(f"the signature named {public.name} has another key's key hash")
    if not _signed(public, lines[0].signature, checkpoint.text.encode()):
        raise _refuse(f"the signature by {public.name} does not match the checkpoint's text")
    return replace(checkpoint, verified_by=public.name)


# -- proofs ------------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({name for name, _ in pairs}) != len(pairs):
        raise _refuse("a JSON object in the proof repeats a key")
    return dict(pairs)


def _load(proof: Any, form: str, fields: set[str]) -> dict[str, Any]:
    """The proof's JSON object, once it has exactly `fields` and is of format `form`."""
    try:
        if isinstance(proof, bytes):
            proof = proof.decode()
        if isinstance(proof, str):
            proof = json.loads(proof, object_pairs_hook=_no_duplicates)  # NaN: refused later
    except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, a repeated key ...
        raise _refuse(f"the proof is not strict UTF-8 JSON: {error}") from None
    if not isinstance(proof, dict) or proof.get("format") != form:
        raise _refuse(f"the proof is not a JSON object of format {form!r}")
    if unknown := sorted(map(repr, set(proof) - fields - {"format"})):
        raise _refuse(f"the proof has unknown keys: {', '.join(unknown)}")
    if missing := sorted(fields - set(proof)):
        raise _refuse(f"the proof lacks keys: {', '.join(missing)}")
    return proof


def _size(proof: dict[str, Any], name: str) -> int:
    if type(proof[name]) is not int or not 0 <= proof[name] <= MAX_SIZE:
        raise _refuse(f"{name} is not an integer in 0..2^63-1")
    return int(proof[name])


def _hex(value: Any, name: str) -> bytes:
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        raise _refuse(f"{name} is not 64 lowercase hex digits")
    return bytes.fromhex(value)


def _path(proof: dict[str, Any]) -> list[bytes]:
    if not isinstance(path := proof["path"], list) or len(path) > MAX_PATH:
        raise _refuse(f"path is not a list of at most {MAX_PATH} hashes")
    return [_hex(item, f"path[{i}]") for i, item in enumerate(path)]


def _header(envelope: bytes) -> list[Any]:
    """[position, stream, version, type, type_version, delivery_id, recorded_at]"""
    line, newline, _ = envelope.partition(b"\n")
    try:
        header = json.loads(line.decode()) if newline else None
    except (ValueError, RecursionError):  # UnicodeDecodeError too
        header = None
    shapes = [[int, str, int, str, int, delivery, str] for delivery in (str, type(None))]
    if not isinstance(header, list) or [type(value) for value in header] not in shapes:
        raise _refuse("the envelope does not start with its 7-field header line")
    return header


def verify_inclusion(proof: Any, key: Any, *, allow_unsigned: bool = False) -> VerifiedEvent:
    """The event an inclusion proof proves to be in the tree its checkpoint signs."""
    fields = {"position", "tree_size", "previous_hash", "envelope", "event_hash", "path"}
    found = _load(proof, "rota-inclusion/1", fields | {"checkpoint"})
    position, tree_size = _size(found, "position"), _size(found, "tree_size")
    previous = _hex(found["previous_hash"], "previous_hash")
    event_hash = _hex(found["event_hash"], "event_hash")
    envelope, path = _b64(found["envelope"], "envelope"), _path(found)
    checkpoint = verify_checkpoint(found["checkpoint"], key, allow_unsigned=allow_unsigned)
    if tree_size != checkpoint.tree_size:
        raise _refuse(f"tree_size {tree_size} is not the checkpoint's ({checkpoint.tree_size})")
    if not 1 <= position <= tree_size:
        raise _refuse(f"position {position} is not in 1..{tree_size}, the checkpoint's tree")
    if position == 1 and previous != bytes(32):
        raise _refuse("previous_hash at position 1 must be 64 zeros")
    if hashlib.sha256(previous + envelope).digest() != event_hash:
        raise _refuse("event_hash is not SHA-256(previous_hash || envelope): edited")
    header = _header(envelope)
    if header[0] != position:
        raise _refuse(f"the envelope is of position {header[0]}, not {position}")
    if position == tree_size and event_hash.hex() != checkpoint.head:
        raise _refuse("the event at the tree size is not the checkpoint's head")
    root = root_from_inclusion_path(position - 1, tree_size, leaf_hash(event_hash), path)
    if root != checkpoint.root:
        raise _refuse("the path does not lead from the event to the checkpoint's root")
    values: list[Any] = [position, tree_size, checkpoint.origin, *header[1:]]
    values += [envelope.partition(b"\n")[2], event_hash.hex(), checkpoint]
    return VerifiedEvent(*values)


def verify_consistency(
    proof: Any, key: Any, *, allow_unsigned: bool = False
) -> tuple[Checkpoint, Checkpoint]:
    """The old and new checkpoints, once the proof shows the new tree extends the old."""
    fields = {"old_size", "new_size", "path", "old_checkpoint", "new_checkpoint"}
    found = _load(proof, "rota-consistency/1", fields)
    old_size, new_size, path = _size(found, "old_size"), _size(found, "new_size"), _path(found)
    old = verify_checkpoint(found["old_checkpoint"], key, allow_unsigned=allow_unsigned)
    new = verify_checkpoint(found["new_checkpoint"], key, allow_unsigned=allow_unsigned)
    if old.origin != new.origin:
        raise _refuse("the two checkpoints are of different logs (their origin lines differ)")
    if (old_size, new_size) != (old.tree_size, new.tree_size):
        raise _refuse(f"sizes {old_size}, {new_size} are not the checkpoints' sizes")
    if old_size == new_size and old.head != new.head:
        raise _refuse("two checkpoints of the same size have different heads")
    check_consistency(old_size, new_size, old.root, new.root, path)
    return old, new


# -- the command line --------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """`verify.py inclusion|consistency PROOF.json --key KEY`: 0 verified, 1 refused."""
    parser = argparse.ArgumentParser(prog="verify.py", description="Check a rota proof offline.")
    parser.add_argument("kind", choices=("inclusion", "consistency"))
    parser.add_argument("proof", help="the proof's JSON file (- for standard input)")
    parser.add_argument("--key", help="the public key: a PEM file, a vkey, or a vkey file")
    parser.add_argument("--allow-unsigned", action="store_true", help="accept unsigned notes")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        with open(args.proof if args.proof != "-" else sys.stdin.fileno(), "rb") as src:
            data = src.read()
        if args.kind == "inclusion":
            event = verify_inclusion(data, args.key, allow_unsigned=args.allow_unsigned)
            result, notes = asdict(event), [event.checkpoint]
            said = f"position {event.position} ({event.type} on {event.stream}) is in"
        else:
            old, new = verify_consistency(data, args.key, allow_unsigned=args.allow_unsigned)
            result, notes = {"old": asdict(old), "new": asdict(new)}, [old, new]
            said = f"tree size {new.tree_size} ({new.time}) extends size {old.tree_size} of"
    except (OSError, VerificationError) as error:
        reason = f"cannot read {args.proof}: {error}" if isinstance(error, OSError) else error
        if args.json:
            print(json.dumps({"ok": False, "kind": args.kind, "reason": str(reason)}))
        else:
            print(f"refused: {reason}", file=sys.stderr)
        return 1
    if args.json:
        as_base64 = lambda data: base64.b64encode(data).decode()  # noqa: E731 (bytes only)
        print(json.dumps({"ok": True, "kind": args.kind, **result}, default=as_base64))
        return 0
    signers = sorted({note.verified_by or "NO ONE (--allow-unsigned)" for note in notes})
    print(f"verified: {said} {notes[-1].origin}; checkpoint signed by {', '.join(signers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
