"""Retry timers: a failure arms a durable timer; firing it is an idempotent event."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from .base import Event


class RetryArmed(Event, tag="core.retry.armed", frozen=True, kw_only=True):
    """A failure armed a durable retry timer.

    `generation` is the failure count it answers (kept apart from attempt numbers);
    `ancestry` the input positions the failed attempt consumed, which the retry re-presents.
    `hinted` marks a delay taken from the executor's retry hint.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    generation: int
    attempt: int
    due_at: datetime
    ancestry: list[int]
    hinted: bool = False


class RetryFired(Event, tag="core.retry.fired", frozen=True, kw_only=True):
    """A due retry timer fired: the Work is eligible again. At most once per generation."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "retry/<work>/<generation>"

    work_id: str
    generation: int
