"""Operator polish of the `rota` command line (issue 28, item 8). Real subprocesses, as in
test_cli.py and test_cli_refusals.py: what a user types, bytes and pipes included."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .cli_process import TIMEOUT, cli_env, refused, rota

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]

[[bindings]]
name = "boom"
executor = "shell"
command = ["sh", "-c", "echo broken >&2; exit 3"]

[[bindings]]
name = "perm"
executor = "shell"
command = ["sh", "-c", "echo misconfigured >&2; exit 78"]
"""


def ok(cwd: Path, *args: str) -> str:
    done = rota(cwd, *args)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr
    return done.stdout.decode()


def as_json(cwd: Path, *args: str) -> Any:
    return json.loads(ok(cwd, *args, "--json"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


def test_version_prints_the_installed_version(home: Path) -> None:
    done = rota(home, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"rota {importlib.metadata.version('rota')}\n"
    assert done.stderr == b""


@pytest.mark.parametrize("value", ["0", "-1", "-0.5", "nan", "NaN", "inf", "-inf", "soon"])
def test_timeout_must_be_positive_and_finite(home: Path, value: str) -> None:
    line = refused(rota(home, "run", "--until-idle", f"--timeout={value}"), "usage", 2)
    assert "--timeout" in line
    assert not (home / "rota.db").exists()  # refused before any store is opened


def test_a_positive_timeout_is_taken(home: Path) -> None:
    assert as_json(home, "run", "--until-idle", "--timeout", "0.5")["states"] == {}


def _closed_after_one_line(home: Path, *args: str) -> tuple[int, bytes]:
    """`rota ARGS | head -1`: the reader takes one line and closes its end of the pipe."""
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=home,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        assert process.stdout.readline()
        process.stdout.close()
        err = process.stderr.read()
        return process.wait(timeout=TIMEOUT), err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("args", [("events",), ("events", "--json"), ("export",)])
def test_a_reader_that_goes_away_is_silent(home: Path, args: tuple[str, ...]) -> None:
    # Over 64 KiB of output (a pipe's buffer), so rota is still writing when head leaves.
    (home / "big.json").write_text(json.dumps({"x": "a" * 200_000}))
    ok(home, "submit", "big", "--binding", "ok", "--input", "@big.json")
    for n in range(3):
        ok(home, "submit", f"w{n}", "--binding", "ok")
    status, err = _closed_after_one_line(home, *args)
    assert err == b"", err  # no traceback, no `rota: output_closed` line
    assert status in (0, 1)  # 1 when rota saw the pipe close, 0 if it had written it all


def _events(home: Path) -> int:
    return len(as_json(home, "events"))


def test_cancelling_a_cancelled_work_says_so_and_succeeds(home: Path) -> None:
    ok(home, "submit", "w", "--binding", "ok")
    assert ok(home, "cancel", "w", "--reason", "not needed") == "w: cancelled\n"
    before = _events(home)
    done = rota(home, "cancel", "w")
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert "already cancelled" in done.stdout.decode()
    assert as_json(home, "cancel", "w")["state"] == "cancelled"
    assert _events(home) == before  # nothing recorded


def test_cancelling_a_completed_work_stays_an_error(home: Path) -> None:
    ok(home, "submit", "good", "--binding", "ok")
    ok(home, "run", "--until-idle")
    line = refused(rota(home, "cancel", "good"), "work_terminal", 1)
    assert "already completed" in line
    # A failed Work (permanently, retries left to an operator) is cancellable, as before.
    ok(home, "submit", "bad", "--binding", "perm")  # exit 78: failed, permanent
    ok(home, "run", "--until-idle")
    assert as_json(home, "work", "show", "bad")["state"] == "failed"
    assert ok(home, "cancel", "bad") == "bad: cancelled\n"


def test_work_show_gives_a_cancelled_works_reason(home: Path) -> None:
    ok(home, "submit", "w", "--binding", "ok")
    ok(home, "cancel", "w", "--reason", "superseded by\nw2", "--by", "ana")
    shown = ok(home, "work", "show", "w")
    assert "cancelled by ana at " in shown
    assert shown.rstrip().endswith(": superseded by w2")  # one line, whatever it holds
    ok(home, "submit", "quiet", "--binding", "ok")
    ok(home, "cancel", "quiet")
    assert "(no reason given)" in ok(home, "work", "show", "quiet")
    assert "cancelled by" not in ok(home, "work", "show", "w", "--json")  # JSON as before


def test_a_permanent_failure_reads_one_of_one(home: Path) -> None:
    ok(home, "submit", "bad", "--binding", "perm")  # exit 78: failed, permanent
    ok(home, "submit", "flaky", "--binding", "boom")  # exit 3: retried, 3 attempts allowed
    ok(home, "run", "--until-idle")
    shown = ok(home, "work", "show", "bad")
    assert "  failures: 1 of 1 (permanent: not retried)\n" in shown
    assert "3 of 3" not in shown
    assert "  failures: 1 of 3\n" in ok(home, "work", "show", "flaky")


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        ((b"submit", b"\xff", b"--binding", b"ok"), "invalid_work_id", 1),
        ((b"work", b"show", b"\xff"), "unknown_work", 1),
        ((b"cancel", b"\xff"), "unknown_work", 1),
        ((b"submit", b"w2", b"--binding", b"\xffok"), "usage", 2),
        ((b"cancel", b"w", b"--reason", b"why \xff"), "usage", 2),
        ((b"events", b"--after", b"\xff"), "usage", 2),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line(
    home: Path, args: tuple[bytes, ...], code: str, exit_code: int
) -> None:
    ok(home, "submit", "w", "--binding", "ok")
    line = refused(rota(home, *args), code, exit_code)
    assert "\\udcff" in line  # the bad bytes, shown escaped
    if code == "usage" and b"--after" not in args:
        assert "is not valid UTF-8" in line and ("--binding" in line or "--reason" in line)
    assert [work["id"] for work in as_json(home, "work", "list")] == ["w"]
    assert as_json(home, "work", "show", "w")["state"] == "ready"
