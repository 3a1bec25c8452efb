"""The workload's actions, performed on a simulated deployment.

Clients and operators reach the engine through a live host's service, as the HTTP API
and the CLI do; a call can fail as any call can (a store fault, a crash of that host),
and a client whose submit was not answered submits again later, with the same Work id:
the submit is idempotent, so nothing may be doubled or lost. An operator vouches for a
stop (`confirm_stopped`) only when nothing of the attempt runs: the simulated operator
is careful, as the runbook asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from rota.application.errors import StoreError
from rota.domain.errors import Refusal, RotaError
from rota.domain.events.work import Debounce, Throttle, Unique
from rota.domain.submission import SubmitWork, WorkInput
from rota.embedded.submission_values import COALESCED
from rota.testing.sim.faults import SimCrash
from rota.testing.sim.hosts import SimHost
from rota.testing.sim.workload import bindings

if TYPE_CHECKING:
    from rota.testing.sim.world import World

RETRY_AFTER = 7.0  # seconds before a client or operator whose call failed tries again
BY = "sim-operator"


def perform(world: World, kind: str, args: dict[str, Any], besides: str | None = None) -> None:
    """Perform one action (see `rota.testing.sim.workload` for the kinds); `besides`: a
    host in the middle of a transaction, which the call must not reach (within one process
    the service's lock serializes calls)."""
    chaos = CHAOS.get(kind)
    if chaos is not None:
        chaos(world, args)
        return
    hosts = [h for h in world.live_hosts() if h.owner != besides]
    if not hosts:
        world.workload.add(world.clock.t + RETRY_AFTER, kind, **args)
        return
    host = hosts[world.random.randrange(len(hosts))]
    call = CALLS[kind]
    try:
        answered = call(world, host, args)
    except SimCrash as crash:
        world.kill(host, crash.where)
        answered = False
    except Refusal as refusal:
        world.count(f"refused {kind} ({refusal.code})")
        return
    except (StoreError, RotaError) as error:
        world.count(f"{kind} failed ({error.code})")
        answered = False
    if answered:
        world.count(f"{kind} answered")
    if not answered and kind in RETRIED:
        world.workload.add(world.clock.t + RETRY_AFTER, kind, **args)
    host.host.wake.set()


def submit(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    command = SubmitWork(
        work_id=args["work_id"],
        binding=args["binding"],
        scope=args["scope"],
        safety=args["safety"],
        inputs=(WorkInput(payload=args["payload"]),),
        priority=args.get("priority", 0),
        keys=tuple(args.get("keys", ())),
        throttle=Throttle(*args["throttle"]) if "throttle" in args else None,
        debounce=Debounce(*args["debounce"]) if "debounce" in args else None,
        unique=Unique(*args["unique"]) if "unique" in args else None,
    )
    recorded = host.service.lifecycle.submit(command)
    if any(e.type in COALESCED for e in recorded.recorded):
        # A merged or suppressed submit creates no Work of its id: it is answered by the
        # event naming the Work it went to (`no_submit_lost_by_debounce` checks that).
        world.coalesced[command.work_id] = world.coalesced.get(command.work_id, 0) + 1
        return True
    world.acknowledged[command.work_id] = world.acknowledged.get(command.work_id, 0) + 1
    return True


def input_(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """More input for a Work (refused once the Work is cancelled, or before it exists)."""
    host.service.lifecycle.accept(args["target"], args["payload"], key=args["key"])
    return True


def define_schedule(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    definition = {k: v for k, v in args.items() if v is not None and k != "name"}
    host.service.schedules.define(args["name"], actor=BY, source="api", **definition)
    return True


def cancel(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.admission.cancel(
        args["target"], reason="simulated operator", by=BY, request_id=args.get("request_id")
    )
    return True


def interrupt(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.control.interrupt(args["target"], by=BY, request_id=args.get("request_id"))
    return True


def retry(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.lifecycle.request_retry(
        args["target"], requested_by=BY, request_id=args.get("request_id")
    )
    return True


def release_hold(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.recovery.release_hold(args["target"], by=BY, request_id=args.get("request_id"))
    return True


def confirm_stopped(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """Vouch for the stop of the Work's ended attempt, only if nothing of it runs."""
    view = host.queries.works.work(args["target"])
    attempt = view.attempts[-1] if view is not None and view.attempts else None
    if attempt is None or attempt.state != "ended" or attempt.stop_confirmed:
        return True
    if world.machine.running(attempt.execution):
        world.count("operator declined to confirm a stop")
        return True
    host.service.lifecycle.confirm_stopped(attempt.execution, attempt.epoch, f"operator: {BY}")
    return True


def trigger_now(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """Fire a schedule now (`rota schedule trigger`), sometimes twice with one key."""
    host.service.schedules.trigger_now(args["target"], key=args.get("key"), actor=BY)
    return True


def backfill(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """Fire every nominal time of the last `hours` (`rota schedule backfill`): times fired
    already are no-ops, by their delivery identities."""
    now = host.queries.state.now()
    start = now - timedelta(hours=args["hours"])
    host.service.schedules.backfill(args["target"], start, now)
    return True


def cancel_retrying(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """Cancel a Work that waits out a retry timer now (picked when the call is made)."""
    timers = sorted(host.queries.state.metrics().timers)
    if not timers:
        return True
    host.service.admission.cancel(timers[world.random.randrange(len(timers))], by=BY)
    return True


def pause_schedule(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.schedules.pause(args["target"], actor=BY, reason="simulated operator")
    return True


def resume_schedule(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    host.service.schedules.resume(args["target"], actor=BY, reason="simulated operator")
    return True


def reload(world: World, host: SimHost, args: dict[str, Any]) -> bool:
    """A configuration reload on every live daemon: each binding's config changes, a new
    generation; attempts pinned to the old one keep their executors."""
    world.generation = args["generation"]
    for each in world.live_hosts():
        service = each.service
        with service.configuring():
            before = service.generation
            for binding in bindings(world.generation).values():
                service.set_binding(binding)
            each.host.keep_generation(before, dict(each.executors))
    return True


# -- chaos: the machine room ---------------------------------------------------------------


def crash(world: World, args: dict[str, Any]) -> None:
    host = world.hosts.get(args["host"])
    if host is not None and host.alive:
        world.kill(host, "by chaos (SIGKILL)")


def start(world: World, args: dict[str, Any]) -> None:
    host = world.hosts.get(args["host"])
    if host is None or not host.alive:
        world.start_host(args["host"])


def pause(world: World, args: dict[str, Any]) -> None:
    """SIGSTOP: the host does nothing until it resumes, past its leases."""
    host = world.hosts.get(args["host"])
    if host is not None and host.alive and not host.stopped(world.clock.t):
        lease = world.settings.lease_seconds
        host.paused_until = world.clock.t + world.random.uniform(0.5 * lease, 4 * lease)
        world.count("pauses")


def restart(world: World, args: dict[str, Any]) -> None:
    """SIGTERM, then the daemon is started again a little later."""
    host = world.hosts.get(args["host"])
    if host is None or not host.alive:
        return
    world.dead.add(host.owner)
    # It died while stopping, or its stop failed: the process exited anyway.
    with contextlib.suppress(SimCrash, Exception):
        host.stop_gracefully()
    world.machine.host_died(host.owner)
    world.count("graceful restarts")
    world.workload.add(world.clock.t + world.random.uniform(0.5, 20.0), "start", host=host.name)


def step_forward(world: World, args: dict[str, Any]) -> None:
    world.clock.step(world.random.uniform(5.0, 900.0))
    world.count("clock steps")


def step_back(world: World, args: dict[str, Any]) -> None:
    world.clock.step(-world.random.uniform(5.0, 900.0))
    world.count("clock steps")


CALLS: dict[str, Callable[[World, SimHost, dict[str, Any]], bool]] = {
    "submit": submit,
    "input": input_,
    "define_schedule": define_schedule,
    "cancel": cancel,
    "interrupt": interrupt,
    "retry": retry,
    "release_hold": release_hold,
    "confirm_stopped": confirm_stopped,
    "trigger_now": trigger_now,
    "backfill": backfill,
    "cancel_retrying": cancel_retrying,
    "pause_schedule": pause_schedule,
    "resume_schedule": resume_schedule,
    "reload": reload,
}
CHAOS: dict[str, Callable[[World, dict[str, Any]], None]] = {
    "crash": crash,
    "start": start,
    "pause": pause,
    "restart": restart,
    "step_forward": step_forward,
    "step_back": step_back,
}
# A call that failed (a store fault, a crash of the host it reached) is sent again later,
# to a host picked again: every kind a client or an operator makes.
RETRIED = frozenset(CALLS)
