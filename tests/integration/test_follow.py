"""docs/guide.md's follower example: an eventsourcing ProjectionRunner builds a read model
from a live rota log, with rota's typed events, and resumes after a restart."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
MARKER = "<!-- follow-example -->"
EXAMPLE = re.compile(
    re.escape(MARKER) + r"\n```python\n(?P<code>.*?)\n```\n\n```text\n(?P<output>.*?)\n```",
    re.DOTALL,
)


def test_the_follower_example_runs_and_resumes_from_its_tracking_position(
    tmp_path: Path,
) -> None:
    found = EXAMPLE.search(GUIDE.read_text())
    assert found is not None, f"{MARKER} must precede a ```python block and its ```text output"
    (tmp_path / "follow.py").write_text(found["code"] + "\n")
    done = subprocess.run(
        [sys.executable, "-P", "follow.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == found["output"].strip()
    assert (tmp_path / "outcomes.db").exists()


def test_the_mapper_gives_rota_typed_events(tmp_path: Path) -> None:
    import rota
    from rota.domain.events import AttemptCompleted, WorkSubmitted
    from rota.infrastructure.eventsourcing.follow import RotaLog

    with rota.open(tmp_path / "m.db") as scheduler:
        scheduler.register("ok", lambda ctx: "done")
        scheduler.submit("a", binding="ok")
        scheduler.run_until_idle()
    app = RotaLog(env=RotaLog.env_for(str(tmp_path / "m.db")))
    try:
        notifications = app.recorder.select_notifications(start=1, limit=100)
        events = [app.mapper.to_domain_event(n) for n in notifications]
    finally:
        app.close()
    assert isinstance(events[0], WorkSubmitted) and events[0].work_id == "a"
    assert any(isinstance(e, AttemptCompleted) and e.data == "done" for e in events)
