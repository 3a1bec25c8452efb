"""The `rota` command as a real subprocess, bytes in and out, for the CLI tests that check
what a user sees: arguments and stdin as given, no traceback, one refusal line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TIMEOUT = 60


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("ROTA_STORE", "ROTA_CONFIG"):
        env.pop(name, None)
    return env


def rota(
    cwd: Path, *args: str | bytes, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=cli_env(),
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


def refused(done: subprocess.CompletedProcess[bytes], code: str, exit_code: int) -> str:
    """The one stderr line of a refusal with `code` and `exit_code`; no traceback."""
    err = done.stderr.decode("utf-8", "backslashreplace")
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"rota: {code}: "), lines[0]
    assert done.returncode == exit_code, (done.returncode, err)
    return lines[0]
