"""`rota run` stops on a SIGTERM whichever of its threads the kernel delivers it to: the
main thread waits on the signal wakeup pipe, not in `Thread.join` (which only a signal to
the main thread itself interrupts)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

import rota
from rota import foreground


class Said:
    """A stand-in for the run's status lines: tells when the daemon says it runs."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.lines: list[str] = []

    def say(self, text: str, message: str, **fields: Any) -> None:
        self.lines.append(message)
        if message == "running":
            self.running.set()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="main")
def test_a_sigterm_taken_by_another_thread_stops_the_daemon() -> None:
    said, returned, rescued = Said(), threading.Event(), threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    passed = threading.Event()

    def other_thread() -> None:
        # Once the loop's first pass is over the main thread is waiting for the worker
        # (before that, a signal is handled as the main thread runs on: no test).
        passed.wait(30)
        # The process's SIGTERM, as the kernel may deliver it: to this thread, not main.
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        if not returned.wait(30):  # the daemon did not stop: free the test, and say so
            rescued.set()
            signal.pthread_kill(main, signal.SIGTERM)

    with rota.open("memory://") as scheduler:
        tick = scheduler.host.tick

        def first_tick() -> Any:
            try:
                return tick()
            finally:
                passed.set()

        scheduler.host.tick = first_tick  # type: ignore[method-assign]
        helper = threading.Thread(target=other_thread, daemon=True)
        helper.start()
        try:
            foreground.run_in_foreground(scheduler, said)  # type: ignore[arg-type]
        finally:
            returned.set()
            helper.join(30)
    assert not rescued.is_set(), "the daemon kept running after a SIGTERM to another thread"
    assert said.lines == ["running", "stopped"]
    assert signal.getsignal(signal.SIGTERM) is not foreground.run_in_foreground  # handlers restored
    assert signal.set_wakeup_fd(-1) == -1  # and the wakeup fd
