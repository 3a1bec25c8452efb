"""`rota.foreground.until_stopped` (what `rota serve` waits in): a SIGTERM the kernel
delivers to another thread (uvicorn's) still stops it. `Event.wait` in the main thread, as
serve had, is a lock wait only the main thread's own signals interrupt: such a SIGTERM went
unseen until the wait's timeout (seen in CI: serve ignored SIGTERM for 60 s)."""

from __future__ import annotations

import signal
import threading

from rota.foreground import stop_on_signals, until_stopped


def test_a_sigterm_taken_by_another_thread_stops_the_wait() -> None:
    stop = threading.Event()
    timed_out = threading.Event()

    def other_thread() -> None:
        # The signal goes to this thread, not the main one (as the kernel may choose).
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    def watchdog() -> None:  # a failure, not a hang, if the wait never wakes
        if not stop.wait(10):
            timed_out.set()
            stop.set()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    guard = threading.Thread(target=watchdog, daemon=True)
    guard.start()
    with stop_on_signals(stop.set):
        # (a timer: the signal comes while the main thread is already waiting)
        sender = threading.Timer(0.2, other_thread)
        sender.start()
        until_stopped(stop)
        sender.join()
    assert stop.is_set() and not timed_out.is_set()
