"""No traceback reaches a user: each bad input is one `rota: <code>: ...` line and its exit
code (issue 15, item 5), and `--input @FILE` / `--input -` read a payload up to the store's
limit (item 7). Real subprocesses: what a user types, bytes and pipes included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rota.domain.results import MAX_DATA_BYTES

from .cli_process import TIMEOUT, cli_env, refused, rota

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


def submitted_input(home: Path, work: str) -> object:
    """The payload of `work`'s input in the log (its first: carried by its definition)."""
    events = json.loads(rota(home, "events", "--json").stdout)
    (event,) = [e for e in events if e["stream"] == f"work/{work}" and e["data"].get("input")]
    return event["data"]["input"]["payload"]


# -- item 5: one line, its code, its exit code ------------------------------------------


def test_a_config_file_that_is_not_utf8(home: Path) -> None:
    (home / "rota.toml").write_bytes(b'\xff\xfe[store]\nurl = "x"\n')
    line = refused(rota(home, "events"), "invalid_config", 2)
    assert "rota.toml: not UTF-8" in line


def test_invalid_utf8_in_a_work_id(home: Path) -> None:
    refused(rota(home, "submit", b"w\xff\xfe", "--binding", "ok"), "invalid_work_id", 1)
    refused(rota(home, "work", "show", b"w\xff"), "unknown_work", 1)


def test_lone_surrogates_in_input(home: Path) -> None:
    escaped = rota(home, "submit", "w", "--binding", "ok", "--input", '"\\ud800"')
    assert "lone surrogate" in refused(escaped, "usage", 2)
    raw = rota(home, "submit", "w", "--binding", "ok", "--input", b'"\xed\xa0\x80"')
    assert "not valid UTF-8" in refused(raw, "usage", 2)


def test_input_nested_5000_deep(home: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    refused(rota(home, "submit", "w", "--binding", "ok", "--input", deep), "payload_too_deep", 1)


def test_a_5000_digit_number(home: Path) -> None:
    line = refused(rota(home, "submit", "w", "--binding", "ok", "--input", "1" * 5000), "usage", 2)
    assert "not valid JSON" in line


def test_events_after_a_position_no_store_can_hold(home: Path) -> None:
    line = refused(rota(home, "events", "--after", "99999999999999999999999"), "usage", 2)
    assert "--after" in line
    refused(rota(home, "events", "--after", "-1"), "usage", 2)
    refused(rota(home, "export", "--from", "99999999999999999999999"), "usage", 2)


def test_events_limit_0_means_none(home: Path) -> None:
    assert rota(home, "submit", "w", "--binding", "ok").returncode == 0
    assert rota(home, "submit", "v", "--binding", "ok").returncode == 0
    assert json.loads(rota(home, "events", "--limit", "0", "--json").stdout) == []
    assert len(json.loads(rota(home, "events", "--limit", "1", "--json").stdout)) == 1
    assert len(json.loads(rota(home, "events", "--json").stdout)) > 1


def test_doctor_into_a_closed_pipe(home: Path) -> None:
    assert rota(home, "submit", "w", "--binding", "ok").returncode == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # `rota doctor | head -0`: the reader is gone before rota writes
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "rota", "doctor"],
            cwd=home,
            env=cli_env(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    # Silent (issue 28, item 8): nothing is wrong when the reader leaves; exit 1.
    assert done.stderr == b"", done.stderr
    assert done.returncode == 1


def test_keygen_into_a_missing_directory(home: Path) -> None:
    line = refused(rota(home, "audit", "keygen", "--out", "missing/dir/key"), "cannot_write", 1)
    assert "missing/dir/key" in line
    assert not (home / "missing").exists()


def test_export_into_a_missing_directory(home: Path) -> None:
    assert rota(home, "submit", "w", "--binding", "ok").returncode == 0
    out = home / "missing" / "dir" / "x"  # as `export --out /missing/dir/x`, inside tmp
    assert str(out) in refused(rota(home, "export", "--out", str(out)), "cannot_write", 1)
    assert not (home / "missing").exists()


def test_json_errors_are_json_on_stderr(home: Path) -> None:
    created = rota(home, "submit", "w", "--binding", "ok")  # a store to export
    assert created.returncode == 0, created.stderr
    out = str(home / "missing" / "dir" / "x")
    done = rota(home, "export", "--out", out, "--json")
    assert done.returncode == 1 and "Traceback" not in done.stderr.decode()
    (line,) = done.stderr.decode().splitlines()
    error = json.loads(line)["error"]
    assert error["code"] == "cannot_write" and out in error["message"]
    usage = rota(home, "events", "--after", "x", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stderr)["error"]["code"] == "usage"


# -- item 7: input from a file or stdin --------------------------------------------------


def test_input_from_a_file(home: Path) -> None:
    (home / "in.json").write_text('{"rows": [1, 2, 3]}\n')
    done = rota(home, "submit", "w", "--binding", "ok", "--input", "@in.json")
    assert done.returncode == 0, done.stderr
    assert submitted_input(home, "w") == {"rows": [1, 2, 3]}


def test_input_from_stdin(home: Path) -> None:
    done = rota(home, "submit", "w", "--binding", "ok", "--input", "-", stdin=b'{"n": 7}')
    assert done.returncode == 0, done.stderr
    assert submitted_input(home, "w") == {"n": 7}


def test_input_files_over_the_payload_limit_name_the_limit(home: Path) -> None:
    (home / "big.json").write_text(json.dumps("x" * MAX_DATA_BYTES))
    line = refused(
        rota(home, "submit", "w", "--binding", "ok", "--input", "@big.json"),
        "payload_too_large",
        1,
    )
    assert f"over {MAX_DATA_BYTES} bytes, the store's payload limit" in line
    stdin = rota(home, "accept", "w", "--input", "-", stdin=b" " * (MAX_DATA_BYTES + 1))
    assert str(MAX_DATA_BYTES) in refused(stdin, "payload_too_large", 1)


def test_input_file_errors(home: Path) -> None:
    refused(rota(home, "submit", "w", "--binding", "ok", "--input", "@nope.json"), "cannot_read", 1)
    (home / "bad.json").write_bytes(b'"\xff"')
    bad = rota(home, "submit", "w", "--binding", "ok", "--input", "@bad.json")
    assert "not valid UTF-8" in refused(bad, "usage", 2)
