"""docs/guide.md's example runs as it is and prints what the guide says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
MARKER = "<!-- guide-example -->"
EXAMPLE = re.compile(
    re.escape(MARKER) + r"\n```python\n(?P<code>.*?)\n```\n"  # the marked block
    r".*?```text\n(?P<output>.*?)\n```",  # the output the guide shows after it
    re.DOTALL,
)


def _example() -> tuple[str, str]:
    text = GUIDE.read_text()
    assert text.count(MARKER) == 1, f"{GUIDE.name} must mark exactly one example"
    found = EXAMPLE.search(text)
    assert found is not None, f"{MARKER} must precede a ```python block and its ```text output"
    return found["code"], found["output"]


def test_the_guide_example_runs_and_prints_what_the_guide_says(tmp_path: Path) -> None:
    code, expected = _example()
    script = tmp_path / "example.py"
    script.write_text(code + "\n")
    done = subprocess.run(
        [sys.executable, "-P", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected.splitlines()
    assert (tmp_path / "app.db").exists()
