"""A launch whose writes the store did not take (a failover): never charged as a failure.

A launch makes fenced writes (its phases, its recovery metadata). When one fails because
the store takes no writes (`store_unavailable`, `store_read_only`, `log_regressed`), the
executor's `launch` raises it; recording a launch failure then would spend a retry, or fail
the Work, for the store's outage (the field notes' "never charge it to the Work"), and, once
its process runs, have its stop verified (killed) and run again. Instead (`unrecorded`):

- an executor that isolates (`Executor.isolates`: the shell executor holds its command
  until the launch is pinned, and kills the held wrapper when the pin fails) whose pin was
  not taken started nothing: the host keeps holding the attempt (its renewals resume with
  the store) and, on the launcher, waits for the store to take writes, then relaunches it
  under a new epoch, failing nothing (`relaunch_unstarted`, reason `not_started`). If the
  lease lapses first, recovery relaunches it by the same rule
  (`rota.domain.recovery.relaunchable`: called, isolated, nothing pinned at its epoch);
- a launch whose recovery metadata was pinned (its process may run, no longer watched
  here) is let go (no renewal, no cancel): its lease lapses and recovery adopts it from the
  metadata, once the store takes writes, and reports its outcome once;
- anything else stays the ambiguous launch it was (`launch_ambiguous`, its slot kept).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING

from rota.application.commands.lifecycle import Claimed
from rota.application.errors import UNWRITABLE, StoreError
from rota.application.ports import Executor
from rota.domain.errors import Refusal

if TYPE_CHECKING:
    from rota.application.launches import Held, Launches

log = logging.getLogger("rota.host")
PROBE_EVERY = 2.0  # seconds between the store probes this wait makes itself


def unrecorded(launches: Launches, held: Held, executor: Executor, exc: BaseException) -> bool:
    """Whether a launch that raised `exc` was handled as not recorded (see the module
    docstring); False: it is the ambiguous failure it was."""
    if not (isinstance(exc, StoreError) and exc.code in UNWRITABLE):
        return False
    if held.ctx.recovery_persisted:
        launches.drop(held, reason=None, cancel=False)  # recovery adopts it
        return True
    if executor.isolates:
        launches.submit(relaunch_when_writable, launches, held)
        return True
    return False


def relaunch_when_writable(launches: Launches, held: Held) -> None:
    """Wait until the store takes writes (while the host still holds the attempt), then
    relaunch it, failing nothing (see the module docstring)."""
    store, pause, probed = launches.service.store, 0.1, time.monotonic()
    wait = threading.Event()  # never set: its timed wait paces the loop
    while not store.state().writable:
        with launches.held_lock:
            if launches.held.get(held.execution_id) is not held:
                return  # dropped meanwhile (a lost lease, a stop): recovery's, not ours
        wait.wait(pause)
        pause = min(pause * 2, 1.0)
        if time.monotonic() - probed >= PROBE_EVERY:  # no daemon probing for us
            probed = time.monotonic()
            with contextlib.suppress(StoreError):
                store.probe()
    try:
        again = launches.service.recovery.relaunch_unstarted(held.execution_id, held.epoch)
    except (Refusal, StoreError) as refused:
        log.info("relaunch of %s refused: %s; left to recovery", held.execution_id, refused)
        launches.drop(held, reason=None, cancel=False)
        return
    launches.drop(held, reason=None, cancel=False)
    if again is not None:
        log.info("relaunching %s: its launch was not recorded", held.execution_id)
        launches.launch_claimed([Claimed(again.work, again.attempt, False)])
