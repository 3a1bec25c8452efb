"""Progress of long runs (verify, export, import, rebuild, doctor, recover-corrupt).

On a terminal (stderr a TTY, and the command not asked for `--json`) it is a bar on one
line, redrawn about ten times a second, with the rate and the time left:
`verify [#############.................]  45%  4500/10000  12,345/s  ETA 0:04`.

Anywhere else (a pipe, a log file, a service manager, `--json`) the bar would be noise, so
progress goes to the log instead: a record on the `rota.progress` logger every
`LOG_EVERY` seconds (`kind` `progress`, with `label`, `done`, `total`, `rate` and
`eta_seconds`), in the command's log format; a run shorter than that writes nothing, and
one that wrote any ends with a `done` record. `silent` bars do neither. Calling `advance`
per row costs next to nothing: the clock is read, the rest is throttled.

A hand-written bar rather than rich or tqdm: it is one line of text, the log records need
rota's formatter and fields anyway, and neither library would save code here.

```python
with Progress(total, "verify") as bar:
    for row in rows:
        ...
        bar.advance()
```
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, TextIO, TypeVar

from rota.infrastructure.decision_lines import FIELDS_ATTRIBUTE

T = TypeVar("T")
WIDTH = 30
INTERVAL = 0.1  # between redraws of a bar
LOG_EVERY = 10.0  # between progress records in the log
LOGGER = logging.getLogger("rota.progress")
Mode = Literal["bar", "log", "off"]


class Progress:
    """A bar on a terminal, periodic log records elsewhere, or nothing (`mode`)."""

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        json: bool = False,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = not json and _isatty(self.stream)
        self.mode: Mode = "bar" if enabled else "log" if log is not None else "off"
        self.total = total if total and total > 0 else None
        self.label = label
        self.done = 0
        self._log = log
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self._drawn = False

    @property
    def enabled(self) -> bool:
        """Whether a bar is drawn."""
        return self.mode == "bar"

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.mode == "off":
            return
        now = self._clock()
        if now - self._last >= (INTERVAL if self.mode == "bar" else LOG_EVERY):
            self._last = now
            self._show(now)

    def close(self) -> None:
        """Show the final state and end the line (only if anything was shown)."""
        if self.mode == "bar" and (self._drawn or self.done):
            self._show(self._clock())
            self.stream.write("\n")
            self.stream.flush()
        elif self.mode == "log" and self._drawn:
            self._show(self._clock(), final=True)
        self.mode = "off"

    def rate(self, now: float) -> float:
        """Items a second since the start."""
        elapsed = now - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def eta(self, now: float) -> float | None:
        """Seconds left at the rate so far (None: no total, or no rate yet)."""
        speed = self.rate(now)
        if self.total is None or speed <= 0:
            return None
        return max(self.total - self.done, 0) / speed

    def _show(self, now: float, *, final: bool = False) -> None:
        self._drawn = True
        if self.mode == "bar":
            self.stream.write("\r" + self.text(now))
            self.stream.flush()
        elif self._log is not None:
            eta = None if final else self.eta(now)
            fields = {
                "kind": "progress",
                "label": self.label,
                "done": self.done,
                "total": self.total,
                "rate": round(self.rate(now), 1),
                "eta_seconds": None if eta is None else round(eta),
            }
            message = f"{self.label}: done" if final else self.text(now, bar=False)
            self._log.info(message, extra={FIELDS_ATTRIBUTE: fields})

    def text(self, now: float, *, bar: bool = True) -> str:
        """`label [###...]  45%  4500/10000  1,234/s  ETA 0:04` (no bar: without it)."""
        speed, eta = self.rate(now), self.eta(now)
        tail = f"  {speed:,.0f}/s" if speed else ""
        if eta is not None and self.done < (self.total or 0):
            tail += f"  ETA {_duration(eta)}"
        if self.total is None:
            return f"{self.label}  {self.done}{tail}"
        fraction = min(self.done / self.total, 1.0)
        filled = int(fraction * WIDTH)
        shown = f" [{'#' * filled}{'.' * (WIDTH - filled)}]" if bar else ":"
        return f"{self.label}{shown} {fraction:4.0%}  {self.done}/{self.total}{tail}"

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


def _duration(seconds: float) -> str:
    """`0:04`, `12:30`, `3:05:09`."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


ProgressFactory = Callable[[int | None, str], Progress]


def factory(*, json: bool = False) -> ProgressFactory:
    """Make bars for a command: drawn on a terminal without `--json`, else log records."""

    def make(total: int | None, label: str) -> Progress:
        return Progress(total, label, json=json, log=LOGGER)

    return make


def silent(total: int | None, label: str) -> Progress:
    """A factory whose bars never draw."""
    return Progress(total, label, enabled=False)
