"""What an operator reads on stderr when something outside rota is wrong (issue 28, item 8):
an unreachable PostgreSQL is one line, and every line is JSON under `--log-format json`,
the HTTP server's included. Real subprocesses, as a user runs them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .cli_process import TIMEOUT, cli_env, refused, rota


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", [("capacity",), ("run", "--store-wait", "0"), ("work", "list")])
def test_an_unreachable_postgresql_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    line = refused(rota(tmp_path, "--store", url, *command), "store_unavailable", 1)
    assert "cannot connect to PostgreSQL" in line
    assert "Connection refused" in line
    assert "rota-" not in line  # no pool name: the pool never started retrying


TOKENS_CONFIG = """
[store]
url = "sqlite:///rota.db"

[http]
tokens = "tokens.json"

[[bindings]]
name = "b"
executor = "shell"
command = ["true"]
"""


def _json_lines(text: str) -> list[dict[str, object]]:
    lines = text.splitlines()
    assert lines, "nothing on stderr"
    return [json.loads(line) for line in lines]  # each one a JSON object, or this fails


@pytest.mark.parametrize("command", [("run", "--http", "127.0.0.1:0"), ("serve",)])
def test_every_stderr_line_is_json_the_http_servers_too(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "rota.toml").write_text(TOKENS_CONFIG)
    assert rota(tmp_path, "token", "add", "ops").returncode == 0
    assert rota(tmp_path, "submit", "w", "--binding", "b").returncode == 0  # (a store to serve)
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", *command, "--log-format", "json"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    said: list[str] = []
    try:
        url = ""
        ready = command[0] == "serve"  # (serve says where it listens once it can stop)
        for line in process.stderr:
            said.append(line)
            record = json.loads(line)
            if record["message"] == "http listening":
                url = str(record["url"])
            ready = ready or record["message"] == "running"  # rota run's signal handlers
            if url and ready:
                break
        else:
            raise AssertionError(f"never said where it listens and that it runs: {said}")
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            sock.sendall(b"NOT HTTP\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 400")  # uvicorn logged it first
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        process.stderr.close()
    records = _json_lines("".join(said) + rest)
    assert process.returncode == 0, records
    loggers = {r["logger"] for r in records}
    assert "uvicorn.error" in loggers, records  # uvicorn's own warning, as JSON
    assert records[-1]["message"] == "stopped"


def test_a_refusal_is_a_json_record_under_json_logs(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    done = rota(tmp_path, "--store", url, "run", "--store-wait", "0", "--log-format", "json")
    assert done.returncode == 1
    (record,) = _json_lines(done.stderr.decode())
    assert record["level"] == "error" and record["code"] == "store_unavailable"
    assert str(record["message"]).startswith("cannot connect to PostgreSQL")


def test_rota_run_waits_for_a_store_it_cannot_reach_and_stops_on_sigterm(tmp_path: Path) -> None:
    # issue 32: the database down when the daemon starts is waited for, not an exit 1
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "--store", url, "run", "--log-format", "json"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        first = json.loads(process.stderr.readline())
        assert first["logger"] == "rota.store" and first["level"] == "warning"
        assert str(first["message"]).startswith("waiting for the store (0 s so far): ")
        assert "store_unavailable" in first["message"] and "Connection refused" in first["message"]
        assert process.poll() is None  # still waiting
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        process.stderr.close()
    assert process.returncode == 0
    assert json.loads(rest.splitlines()[-1])["message"] == "stopped"


def test_a_store_wait_that_runs_out_is_the_refusal(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    done = rota(tmp_path, "--store", url, "run", "--store-wait", "1")
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert "waiting for the store" in lines[0]
    assert lines[-1].startswith("rota: store_unavailable: cannot connect to PostgreSQL")
