"""Optimisation: a launch's cancel event makes no lock and condition until someone waits
(bench lifecycle).

`CancelEvent`: the `threading.Event` a launch's `ctx.cancel` is, made cheap to create.

Every launch gets one, and most are never waited on (an attempt that finishes before its
lease is lost never looks at it but with `is_set()`). A plain `threading.Event` builds a
lock and a condition on creation; this one builds them on the first `wait()`, and is a
`threading.Event` in every other respect (it is one: `isinstance` holds, and every public
method behaves the same).
"""

from __future__ import annotations

import threading

# Guards every CancelEvent's flag and its creation of the event it waits on: short,
# uncontended critical sections (a set, a clear, the start of a wait).
_GUARD = threading.Lock()


class CancelEvent(threading.Event):
    """A `threading.Event` whose waiting machinery is made on the first `wait()`."""

    def __init__(self) -> None:
        # Not `threading.Event.__init__`: no lock and condition until someone waits. Every
        # public method is overridden below, so the base class's state is never read.
        self._set = False
        self._waitable: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    isSet = is_set

    def set(self) -> None:
        with _GUARD:
            self._set = True
            if self._waitable is not None:
                self._waitable.set()

    def clear(self) -> None:
        with _GUARD:
            self._set = False
            if self._waitable is not None:
                self._waitable.clear()

    def wait(self, timeout: float | None = None) -> bool:
        with _GUARD:
            if self._set:
                return True
            waitable = self._waitable
            if waitable is None:
                waitable = self._waitable = threading.Event()
        # Set (or cleared) under the guard from now on, so it follows `_set` exactly.
        return waitable.wait(timeout)

    def __repr__(self) -> str:
        status = "set" if self._set else "unset"
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: {status}>"
