"""`rota work show` and `rota work list`: one Work described, and Works a page at a time
(registered by rota.cli.work)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from typing import get_args

import msgspec

from rota.application.queries.work_views import WorkSummary, WorkView
from rota.cli.common import UsageError, open_rota, print_json
from rota.domain.errors import DomainCode, RotaError
from rota.domain.state import WorkStateName
from rota.projections.work_pages import MAX_LIMIT
from rota.scheduler import Scheduler

STATE_ORDER: tuple[str, ...] = get_args(WorkStateName)


def work_view(scheduler: Scheduler, work_id: str) -> WorkView:
    """`Scheduler.work`, or `unknown_work`."""
    view = scheduler.work(work_id)
    if view is None:
        raise RotaError(f"no Work {work_id!r} in this store", code=DomainCode.UNKNOWN_WORK)
    return view


def states(counts: Counter[str]) -> dict[str, int]:
    """Works per state, in the states' order."""
    return {state: counts[state] for state in STATE_ORDER if state in counts}


def state_line(counts: Counter[str]) -> str:
    total = sum(counts.values())
    if not total:
        return "no Work"
    listed = ", ".join(f"{n} {state}" for state, n in states(counts).items())
    return f"{total} Work: {listed}"


def _describe(view: WorkView) -> list[str]:
    """A readable rendering of one Work view."""
    lines = [
        f"{view.id}: {view.state}  (binding {view.binding}, scope {view.scope}, "
        f"{view.kind}, submitted {view.submitted_at})"
    ]
    if view.grants:
        lines.append(f"  grants: {', '.join(view.grants)}")
    flow = flow_line(view)
    if flow:
        lines.append(f"  flow: {flow}")
    if view.pending:
        keys = ", ".join(p.key for p in view.pending)
        lines.append(f"  pending input: {keys}")
        lines.extend(f"    {p.key} queued: {p.queued}" for p in view.pending if p.queued)
    for attempt in view.attempts:
        line = f"  attempt {attempt.number} (epoch {attempt.epoch}): {attempt.state}"
        if attempt.outcome:
            line += f", {attempt.outcome}"
        elif attempt.released:
            line += " (lease released)"
        if attempt.error:
            line += f", {attempt.error.code}: {attempt.error.message}"
        lines.append(line)
        if attempt.data is not None:
            lines.append(f"    data: {msgspec.json.encode(attempt.data).decode()}")
        if attempt.wait is not None:
            lines.append(f"    waits for: {attempt.wait.describe}")
        for artifact in attempt.artifacts:
            facts = [f for f in (artifact.digest, _bytes(artifact.size)) if f is not None]
            more = f" ({', '.join(facts)})" if facts else ""
            lines.append(f"    artifact {artifact.name}: {artifact.uri}{more}")
    retry = view.retry
    if retry.blocked_reason == "permanent_failure":
        # The domain counts a permanent failure as the whole budget spent (no retry is
        # left), but the line reads as attempts made of attempts allowed: all it got.
        made = len(view.attempts)
        lines.append(f"  failures: {made} of {made} (permanent: not retried)")
    elif retry.failures:
        budget = f" of {retry.budget}" if retry.budget else ""
        lines.append(f"  failures: {retry.failures}{budget}")
    if retry.next_due:
        lines.append(f"  retry due: {retry.next_due}")
    if retry.blocked_reason:
        lines.append(f"  blocked: {retry.blocked_reason}")
    if view.waiting:
        lines.append(f"  waiting: {view.waiting.code}: {view.waiting.detail}")
    return lines


def flow_line(view: WorkView) -> str:
    """`priority 5, keys tenant:acme, cost 2, throttle tenant:acme every 60s`: the
    flow-control settings that are set (not the defaults); empty when none is."""
    parts = []
    if view.priority:
        parts.append(f"priority {view.priority}")
    if view.keys:
        parts.append(f"keys {', '.join(view.keys)}")
    if view.cost != 1:
        parts.append(f"cost {view.cost}")
    if view.throttle is not None:
        parts.append(f"throttle {view.throttle.key} every {view.throttle.period:g}s")
    return ", ".join(parts)


def _bytes(size: int | None) -> str | None:
    return None if size is None else f"{size} bytes"


# -- commands ----------------------------------------------------------------------------


def _cancelled_line(scheduler: Scheduler, work_id: str) -> str | None:
    """`cancelled by WHO at TIME: REASON`, the Work's last cancellation."""
    found = scheduler.queries.works.cancellation(work_id)
    if found is None:
        return None
    reason = " ".join(found.reason.split()) or "(no reason given)"
    return f"  cancelled by {found.by} at {found.at}: {reason}"


def _forgotten_line(scheduler: Scheduler, work_id: str) -> str | None:
    """`personal data forgotten by WHO at TIME: REASON`, when it was."""
    found = scheduler.queries.works.forgetting(work_id)
    if found is None:
        return None
    reason = " ".join(found.reason.split()) or "(no reason given)"
    return f"  personal data forgotten by {found.by} at {found.at}: {reason}"


def cmd_work_show(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        view = work_view(scheduler, args.work)
        cancelled = _cancelled_line(scheduler, args.work) if view.state == "cancelled" else None
        forgotten = _forgotten_line(scheduler, args.work)
    if args.json:
        print_json(view)
    else:
        extra = [line for line in (cancelled, forgotten) if line]
        print("\n".join([*_describe(view), *extra]))
    return 0


HEADER = ("WORK", "STATE", "BINDING", "SCOPE", "ATTEMPTS", "LAST OUTCOME")


def _table_rows(works: list[WorkSummary]) -> list[tuple[str, ...]]:
    return [
        (w.id, w.state, w.binding, w.scope, str(w.attempts), note)
        for w in works
        for note in [w.last_outcome or w.waiting or "-"]
    ]


def _print_table(rows: list[tuple[str, ...]], widths: list[int]) -> None:
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())


def _pages(scheduler: Scheduler, args: argparse.Namespace) -> Iterator[list[WorkSummary]]:
    """The pages a listing prints: one (`--limit`) or every page from `--after` on."""
    after: str | None = args.after or ""
    while after is not None:
        page, after = scheduler.works_page(
            state=args.state,
            scope=args.scope,
            binding=args.binding,
            after=after,
            limit=args.limit or MAX_LIMIT,
        )
        args.next_cursor = after
        yield page
        if args.limit:
            return


def cmd_work_list(args: argparse.Namespace) -> int:
    """List Works in id order a page at a time, so no listing holds every Work: every
    matching Work (a JSON array with `--json`), or one page with `--limit` (a JSON object
    with the page's `works` and the `next` cursor, for `--after`)."""
    if args.limit is not None and not 1 <= args.limit <= MAX_LIMIT:
        raise UsageError(f"--limit takes 1 to {MAX_LIMIT}")
    counts: Counter[str] = Counter()
    widths: list[int] | None = None
    with open_rota(args) as scheduler:
        if args.json and args.limit:
            works = next(_pages(scheduler, args))
            print_json({"works": works, "next": args.next_cursor})
            return 0
        if args.json:
            sys.stdout.write("[")
        first = True
        for page in _pages(scheduler, args):
            counts.update(w.state for w in page)
            if args.json:
                for work in page:
                    sys.stdout.write(("" if first else ",") + msgspec.json.encode(work).decode())
                    first = False
                continue
            rows = _table_rows(page)
            if widths is None:
                widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
                rows.insert(0, HEADER)
            _print_table(rows, widths)
    if args.json:
        sys.stdout.write("]\n")
        return 0
    print(state_line(counts))
    if args.limit and args.next_cursor is not None:
        print(f"more: --after {args.next_cursor}")
    return 0
