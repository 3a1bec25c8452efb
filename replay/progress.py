"""A tiny progress bar for long runs (verify, export, import, rebuild), on stderr.

It draws only when stderr is a terminal and the command was not asked for `--json`;
otherwise every call is a no-op, so scripts and pipes see nothing extra. Redraws are
throttled to about ten a second, so calling `advance` per row costs next to nothing.

```python
with Progress(total, "verify") as bar:
    for row in rows:
        ...
        bar.advance()
```
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")
WIDTH = 30
INTERVAL = 0.1


class Progress:
    """`label [#####.....]  45%  4500/10000` on one terminal line, or nothing."""

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        json: bool = False,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = not json and _isatty(self.stream)
        self.enabled = enabled
        self.total = total if total and total > 0 else None
        self.label = label
        self.done = 0
        self._clock = clock
        self._last = 0.0
        self._drawn = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last >= INTERVAL:
            self._last = now
            self._draw()

    def close(self) -> None:
        """Draw the final state and end the line (only if anything was drawn)."""
        if self.enabled and (self._drawn or self.done):
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def _draw(self) -> None:
        if self.total is None:
            text = f"{self.label}  {self.done}"
        else:
            fraction = min(self.done / self.total, 1.0)
            filled = int(fraction * WIDTH)
            bar = "#" * filled + "." * (WIDTH - filled)
            text = f"{self.label} [{bar}] {fraction:4.0%}  {self.done}/{self.total}"
        self.stream.write("\r" + text)
        self.stream.flush()
        self._drawn = True

    def track(self, items: Iterable[T], every: int = 1000) -> Iterator[T]:
        """Yield the items, advancing by one for each (counted in batches of `every`)."""
        count = 0
        for item in items:
            yield item
            count += 1
            if count == every:
                self.advance(count)
                count = 0
        if count:
            self.advance(count)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


ProgressFactory = Callable[[int | None, str], Progress]


def factory(*, json: bool = False) -> ProgressFactory:
    """Make bars for a command: drawn only on a terminal and without `--json`."""

    def make(total: int | None, label: str) -> Progress:
        return Progress(total, label, json=json)

    return make


def silent(total: int | None, label: str) -> Progress:
    """A factory whose bars never draw."""
    return Progress(total, label, enabled=False)
