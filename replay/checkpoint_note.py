"""The checkpoint's text form: a C2SP `tlog-checkpoint` in a C2SP signed note.

UTF-8, "\\n" line ends. The note text is five lines, each ending in "\\n":

    rota/<store_id>
    <tree size, decimal, no leading zeros>        (= the checkpoint's position)
    <Merkle root, standard base64 with padding>
    head <64 lowercase hex: the chain hash at that position, 64 zeros at 0>
    time <written_at, ISO UTC>

A signed note adds an empty line, then `— <key name> <base64(key hash || signature)>` (an
em dash U+2014 and a space first): key name `rota-<key_id>` (the first 16 hex digits of the
SHA-256 of the raw 32-byte Ed25519 public key), key hash the first 4 bytes of
SHA-256(key name || 0x0A || 0x01 || raw public key), and the 64-byte Ed25519 signature of
exactly the note text. An unsigned note is the text alone. Other signature lines (other
keys' cosignatures) are kept out of rota's reading: only the `rota-` one is rota's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

DASH = "\u2014 "
SIZE_RE = re.compile(r"^(0|[1-9][0-9]*)$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEY_NAME = re.compile(r"^rota-([0-9a-f]{16})$")
ORIGIN_RE = re.compile(r"^rota/([0-9A-Za-z-]{1,64})$")


class NoteError(ValueError):
    """Text that is not a rota checkpoint note (the message says what is wrong)."""


def key_name(key_id: str) -> str:
    return f"rota-{key_id}"


def key_hash(key_id: str, raw_public_key: bytes) -> str:
    """The C2SP signed-note key hash of rota's Ed25519 key, 8 hex digits."""
    name = key_name(key_id).encode()
    return hashlib.sha256(name + b"\n\x01" + raw_public_key).digest()[:4].hex()


def vkey(key_id: str, raw_public_key: bytes) -> str:
    """The C2SP verifier key: `<name>+<key hash>+<base64(0x01 || public key)>`."""
    encoded = base64.b64encode(b"\x01" + raw_public_key).decode()
    return f"{key_name(key_id)}+{key_hash(key_id, raw_public_key)}+{encoded}"


def note_text(store_id: str, size: int, root_hex: str, head_hash: str, written_at: str) -> str:
    root = base64.b64encode(bytes.fromhex(root_hex)).decode()
    return f"rota/{store_id}\n{size}\n{root}\nhead {head_hash}\ntime {written_at}\n"


def signature_line(key_id: str, key_hash_hex: str, signature_hex: str) -> str:
    blob = base64.b64encode(bytes.fromhex(key_hash_hex) + bytes.fromhex(signature_hex)).decode()
    return f"{DASH}{key_name(key_id)} {blob}\n"


def parse(data: bytes) -> dict[str, Any]:
    """A note's fields (`store_id`, `position`, `root`, `head_hash`, `written_at`, and for a
    signed one `key_id`, `key_hash`, `signature`, hex), or `NoteError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("it is not UTF-8") from None
    lines = text.split("\n")
    if len(lines) < 6:
        raise NoteError("it has fewer than the five lines of a checkpoint note")
    origin, size, root, head, time = lines[:5]
    if not (m := ORIGIN_RE.fullmatch(origin)):
        raise NoteError(f"its origin line {origin[:80]!r} is not rota/<store id>")
    if not SIZE_RE.fullmatch(size):
        raise NoteError(f"its size line {size[:40]!r} is not a decimal number")
    try:
        raw_root = base64.b64decode(root, validate=True)
    except binascii.Error:
        raise NoteError("its root line is not standard base64") from None
    if len(raw_root) != 32 or base64.b64encode(raw_root).decode() != root:
        raise NoteError("its root line is not the base64 of 32 bytes")
    if not head.startswith("head ") or not HEX64.fullmatch(head[5:]):
        raise NoteError("its fourth line is not 'head <64 lowercase hex>'")
    if not time.startswith("time ") or not time[5:]:
        raise NoteError("its fifth line is not 'time <ISO UTC time>'")
    fields: dict[str, Any] = {
        "store_id": m.group(1),
        "position": int(size),
        "root": raw_root.hex(),
        "head_hash": head[5:],
        "written_at": time[5:],
    }
    rest = lines[5:]
    if rest == [""]:
        return fields  # unsigned: the text alone
    if rest[0] != "" or rest[-1] != "" or len(rest) < 3:
        raise NoteError("after its five lines comes neither the end nor an empty line")
    for line in rest[1:-1]:
        if not line.startswith(DASH) or line.count(" ") != 2:
            raise NoteError("a signature line is not '\u2014 <key name> <base64>'")
        name, blob = line[len(DASH) :].split(" ")
        if not (k := KEY_NAME.fullmatch(name)):
            continue  # another key's signature: not rota's to judge
        if "key_id" in fields:
            raise NoteError("it carries two signatures of rota keys")
        try:
            raw = base64.b64decode(blob, validate=True)
        except binascii.Error:
            raise NoteError("a signature is not standard base64") from None
        if len(raw) != 68:
            raise NoteError("a signature is not 4 bytes of key hash and 64 of Ed25519")
        fields.update(key_id=k.group(1), key_hash=raw[:4].hex(), signature=raw[4:].hex())
    return fields
