"""`make demo`: an embedded scheduler running shell jobs and a Python callable.

It recreates `demo-data/` in the working directory, writes `demo-data/rota.toml` with two
shell bindings, opens a scheduler on `demo-data/rota.db` with `rota.open(...)`, registers a
Python callable, submits five Works, runs them with `run_until_idle()` and prints what the
log says happened: each Work's state and attempts, the history of the log, and the hash
chain's verdict. The failing job ends in `retry_wait`: its retry timer is 5 minutes out.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import rota
from rota.application.queries.work_views import AttemptView
from rota.application.timestamps import parse_timestamp
from rota.replay.audit import verify_chain

DATA = Path("demo-data")
CONFIG = """\
[store]
url = "sqlite:///{db}"

[[bindings]]
name = "report"
executor = "shell"
command = ["sh", "-c", "echo \\"report for $ROTA_WORK_ID, input $ROTA_INPUT\\""]

[[bindings]]
name = "flaky"
executor = "shell"
command = ["sh", "-c", "echo 'the upstream service is down' >&2; exit 3"]
"""


def wordcount(ctx: rota.LaunchContext) -> dict[str, Any]:
    """The in-process callable: count the words of the input's text."""
    text = ctx.trigger["text"]
    return {"words": len(text.split()), "work": ctx.work_id}


def _cli() -> str:
    """How to run the `rota` command from the working directory."""
    script = Path(sys.executable).parent / "rota"
    if not script.exists():
        return f"{sys.executable} -P -m rota"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _attempt_line(attempt: AttemptView) -> str:
    line = f"    attempt {attempt.number} ({attempt.executor}): {attempt.outcome}"
    if attempt.error:
        line += f", {attempt.error.code}: {attempt.error.message}"
    data = attempt.data
    if isinstance(data, dict) and "stdout_tail" in data:
        for stream in ("stdout", "stderr"):
            if output := data[f"{stream}_tail"].strip():
                line += f"; {stream} {output!r}"
    elif data is not None:
        line += f"; returned {data}"
    return line


def _show_work(scheduler: rota.Scheduler) -> None:
    now = scheduler.store.now()
    print("\nWork (state, then each attempt):")
    for summary in scheduler.works():
        view = scheduler.work(summary.id)
        assert view is not None
        print(f"  {view.id}: {view.state}  (binding {view.binding})")
        for attempt in view.attempts:
            print(_attempt_line(attempt))
        retry = view.retry
        if retry.next_due:
            due = parse_timestamp(retry.next_due)
            seconds = (due - now).total_seconds()
            print(
                f"    retry timer: next_due {retry.next_due} (in {seconds:.0f} s); "
                f"{retry.failures} of {retry.budget} attempts failed so far"
            )


def _show_log(scheduler: rota.Scheduler) -> None:
    events = list(scheduler.iter_events())
    print(f"\nThe log ({len(events)} events: position  stream@version  type):")
    for event in events:
        print(f"  {event.position:>3}  {event.stream + '@' + str(event.version):<22}  "
              f"{event.type}")  # fmt: skip


def main() -> None:
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir()
    config = DATA / "rota.toml"
    config.write_text(CONFIG.format(db=(DATA / "rota.db").resolve()))
    print(f"wrote {config}: shell bindings 'report' (prints a line) and 'flaky' (exits 3)")

    with rota.open(DATA / "rota.db", config=config) as scheduler:
        scheduler.register("wordcount", wordcount)
        print("registered the Python callable 'wordcount' (a binding of the same name)")
        scheduler.submit("report-1", binding="report", input={"day": 1})
        scheduler.submit("report-2", binding="report", input={"day": 2})
        scheduler.submit("nightly-sync", binding="flaky")
        scheduler.submit("count-1", binding="wordcount", input={"text": "an append-only log"})
        scheduler.submit("count-2", binding="wordcount", input={"text": "one source of truth"})
        before = scheduler.store.head().position
        scheduler.submit("report-1", binding="report", input={"day": 1})
        again = scheduler.store.head().position - before
        print(f"submitted 5 Works; submitting report-1 again wrote {again} events")

        started = time.monotonic()
        scheduler.run_until_idle(timeout=30)
        print(f"run_until_idle() returned after {time.monotonic() - started:.2f} s")

        _show_work(scheduler)
        _show_log(scheduler)
        report = verify_chain(scheduler.store)
        verdict = "ok" if report.ok else f"BROKEN at {report.first_bad_position}: {report.reason}"
        print(
            f"\nverify_chain: {verdict}; {report.checked} events checked, "
            f"head {report.head_position} {report.head_hash[:16]}..."
        )

    cli = f"{_cli()} --config {config}"
    print(f"\nNext, from {os.getcwd()}:")
    for command in (
        "work list",
        "work show nightly-sync --json",
        "events --after 10",
        "audit verify",
        "submit report-3 --binding report --input '{\"day\": 3}'",
        "run --until-idle",
    ):
        print(f"  {cli} {command}")
    print("(the CLI runs the shell bindings; 'wordcount' exists only inside this demo process)")


if __name__ == "__main__":
    main()
