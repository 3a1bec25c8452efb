"""`rota import` killed half way (a real SIGKILL of the subprocess) leaves no store that
looks whole, and running the same import again resumes it (issue 28, item 5).

The import reads its export from a FIFO the test feeds: the whole file for the import's
verifying pass, then only the first 2,500 rows and no end, so the importer commits two
pages of 1,000 and blocks reading. The test polls the rows committed (with a deadline),
then kills it: no sleep stands in for a condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import rota
from rota.replay.export import export_to_file

from .cli_process import cli_env, refused
from .cli_process import rota as run_rota

WORKS = 3000  # one event each (a definition carrying its input): three pages
FED = 2500  # rows fed before the feeder stops (the import then commits 2 pages and waits)
DEADLINE = 60.0


@pytest.fixture(scope="module")
def export_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("source")
    with rota.open(folder / "source.db", config={}) as scheduler:
        scheduler.register("b", lambda ctx: None)
        scheduler.submit_many({"work_id": f"w{i}", "binding": "b"} for i in range(WORKS))
        out = folder / "log.jsonl"
        export_to_file(scheduler.store, out)
    return out


def _holds(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (Linux: its /proc/PID/fd links)."""
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(FileNotFoundError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(path):
                    return True
    return False


def _feed(fifo: Path, lines: list[bytes], pid: int, done: threading.Event) -> None:
    """Write the export through the FIFO twice: whole (the verify pass), then the header
    and `FED` rows, keeping the FIFO open until `done` (the import then blocks).

    The second pass opens the FIFO only once the importer closed it after the first (it is
    then blocked opening it again, which holds no descriptor): a writer that opened sooner
    would feed the first pass instead."""
    with open(fifo, "wb") as out:
        out.writelines(lines)
    deadline = time.monotonic() + DEADLINE
    while _holds(pid, fifo):
        assert time.monotonic() < deadline, "the import never closed its first pass"
        time.sleep(0.01)  # polling the condition, with a deadline
    with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as out:  # the kill ends it
        out.writelines(lines[: 1 + FED])
        out.flush()
        done.wait(DEADLINE)


def _kill_mid_import(
    tmp_path: Path, export_file: Path, target: str, committed: Callable[[], int]
) -> None:
    """Run `rota import` from a FIFO, wait until it committed 2,000 rows, SIGKILL it."""
    fifo = tmp_path / "feed.jsonl"
    os.mkfifo(fifo)
    done = threading.Event()
    lines = export_file.read_bytes().splitlines(keepends=True)
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "import", str(fifo), "--to", target],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    feeder = threading.Thread(target=_feed, args=(fifo, lines, process.pid, done), daemon=True)
    feeder.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while committed() < 2000:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the import never committed two pages"
            time.sleep(0.02)  # polling the condition, with a deadline
        assert committed() == 2000  # blocked reading row 2,501: no third page
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=DEADLINE)
        assert process.returncode == -signal.SIGKILL
    finally:
        done.set()
        if process.poll() is None:
            process.kill()
            process.communicate()
        feeder.join(timeout=DEADLINE)


def _rows(path: Path) -> int:
    if not path.exists():
        return 0
    with apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
        except (apsw.SQLError, apsw.BusyError):  # the schema is being created
            return 0


def test_a_killed_sqlite_import_leaves_no_store_and_resumes(
    tmp_path: Path, export_file: Path
) -> None:
    target = tmp_path / "new" / "moved.db"  # its folder does not exist either
    partial = tmp_path / "new" / "moved.db.importing"
    _kill_mid_import(tmp_path, export_file, f"sqlite:///{target}", lambda: _rows(partial))

    assert not target.exists()  # no half store where the store will be
    verify = run_rota(tmp_path, "--store", f"sqlite:///{target}", "audit", "verify")
    refused(verify, "store_not_found", 1)

    again = run_rota(tmp_path, "import", str(export_file), "--to", f"sqlite:///{target}")
    assert again.returncode == 0, again.stderr
    out = again.stdout.decode()
    assert f"imported {WORKS} events" in out
    assert "resumed an interrupted import after position 2000" in out
    assert not partial.exists()
    verify = run_rota(tmp_path, "--store", f"sqlite:///{target}", "audit", "verify")
    assert verify.returncode == 0, verify.stderr
    with rota.open(target) as scheduler:
        assert scheduler.store.head().position == WORKS
        assert scheduler.store.unfinished_import() is None


def test_an_import_into_an_existing_store_is_marked_until_it_ends(
    tmp_path: Path, export_file: Path
) -> None:
    target = tmp_path / "empty.db"
    with rota.open(target, config={}):
        pass  # an empty store, as 'rota run' would have made it
    _kill_mid_import(tmp_path, export_file, f"sqlite:///{target}", lambda: _rows(target))

    for command in (("audit", "verify"), ("events",), ("work", "list")):
        done = run_rota(tmp_path, "--store", f"sqlite:///{target}", *command)
        line = refused(done, "import_incomplete", 1)
        assert "2000 of the 3000 events" in line and "rota import" in line
    with pytest.raises(rota.RotaError) as opened:
        rota.open(target)
    assert opened.value.code == "import_incomplete"
    doctor = run_rota(tmp_path, "--store", f"sqlite:///{target}", "doctor", "--json")
    assert doctor.returncode == 1
    chain = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "hash_chain")
    assert chain["status"] == "fail" and "unfinished import: 2000 of the 3000" in chain["detail"]

    again = run_rota(tmp_path, "import", str(export_file), "--to", f"sqlite:///{target}")
    assert again.returncode == 0, again.stderr
    assert "after position 2000" in again.stdout.decode()
    assert run_rota(tmp_path, "--store", f"sqlite:///{target}", "audit", "verify").returncode == 0


def test_another_export_does_not_finish_an_unfinished_import(
    tmp_path: Path, export_file: Path
) -> None:
    target = tmp_path / "empty.db"
    with rota.open(target, config={}) as scheduler:
        scheduler.store.mark_import(f"9 {'ab' * 32}")  # as an import of another export left it
    done = run_rota(tmp_path, "import", str(export_file), "--to", f"sqlite:///{target}")
    line = refused(done, "import_incomplete", 1)
    assert "another export" in line


@pytest.mark.postgres
def test_a_killed_postgres_import_is_refused_until_resumed(
    tmp_path: Path, export_file: Path
) -> None:
    from postgres import admin_execute, schema_url, temporary_schema

    with temporary_schema() as schema:
        url = schema_url(schema)

        def committed() -> int:
            try:
                rows = admin_execute(f'SELECT count(*) FROM "{schema}".events')
            except Exception:  # the schema's tables are not created yet
                return 0
            return int(rows[0][0])  # type: ignore[call-overload]

        _kill_mid_import(tmp_path, export_file, url, committed)
        done = run_rota(tmp_path, "--store", url, "audit", "verify")
        assert "2000 of the 3000 events" in refused(done, "import_incomplete", 1)

        again = run_rota(tmp_path, "import", str(export_file), "--to", url)
        assert again.returncode == 0, again.stderr
        assert "after position 2000" in again.stdout.decode()
        assert run_rota(tmp_path, "--store", url, "audit", "verify").returncode == 0


def test_a_refused_import_leaves_nothing_behind(tmp_path: Path, export_file: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = export_file.read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join(lines[:-1]))  # cut short: the header's head is not reached
    target = tmp_path / "new.db"
    done = run_rota(tmp_path, "import", str(bad), "--to", f"sqlite:///{target}")
    refused(done, "invalid_export", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "new.db.lock"]
