"""The checkpoint note's reading is strict: only the shared byte form is a checkpoint."""

from __future__ import annotations

import base64

import pytest

from rota.replay import checkpoint_note as note

ROOT = base64.b64encode(bytes(range(32))).decode()
TEXT = f"rota/s-1\n42\n{ROOT}\nhead {'ab' * 32}\ntime 2026-12-07T00:00:00Z\n"
SIG = base64.b64encode(b"\x01\x02\x03\x04" + bytes(64)).decode()
SIGNED = f"{TEXT}\n\u2014 rota-0123456789abcdef {SIG}\n"


def test_the_shared_form_reads_back() -> None:
    fields = note.parse(SIGNED.encode())
    assert fields == {
        "store_id": "s-1",
        "position": 42,
        "root": bytes(range(32)).hex(),
        "head_hash": "ab" * 32,
        "written_at": "2026-12-07T00:00:00Z",
        "key_id": "0123456789abcdef",
        "key_hash": "01020304",
        "signature": "00" * 64,
    }
    assert "key_id" not in note.parse(TEXT.encode())
    other = f"{TEXT}\n\u2014 witness.example {SIG}\n\u2014 rota-0123456789abcdef {SIG}\n"
    assert note.parse(other.encode())["key_id"] == "0123456789abcdef"  # cosigners ignored


@pytest.mark.parametrize(
    "text",
    [
        TEXT.replace("\n42\n", "\n042\n"),  # a leading zero
        TEXT.replace("\n42\n", "\n-1\n"),
        TEXT.replace(ROOT, ROOT.rstrip("=")),  # unpadded
        TEXT.replace(ROOT, base64.b64encode(bytes(31)).decode()),  # not 32 bytes
        TEXT.replace("head ", "head  "),
        TEXT.replace("ab" * 32, "AB" * 32),  # upper-case hex
        TEXT.replace("rota/s-1", "other/s-1"),
        TEXT.replace("time ", "when "),
        TEXT[:-1],  # no final newline
        TEXT + "extra\n",
        f"{TEXT}\n",  # an empty line and no signature
        SIGNED.replace("\u2014 ", "- "),
        SIGNED.replace(SIG, SIG[:-4]),  # a truncated signature
        f"{TEXT}\n\u2014 rota-0123456789abcdef {SIG}\n\u2014 rota-0123456789abcdef {SIG}\n",
        SIGNED.replace("\n", "\r\n"),
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(note.NoteError):
        note.parse(text.encode())


def test_not_utf8_is_refused() -> None:
    with pytest.raises(note.NoteError, match="UTF-8"):
        note.parse(b"\xff" + TEXT.encode())
