"""The flow-control families of `/metrics`: slots in use and the limit of each concurrency
key, the tokens in each rate bucket, paused targets, and the ready Work the last start
pass held back, by code.

Keys and buckets are named by the Works that use them, so their labels are bounded here:
at most `labels` keys (the busiest first: most in use, then most waiting, then by name)
and `labels` buckets (the emptiest first) get a label of their own; the rest are summed
into one series labelled `other`. Every series still counts against the scrape's series
budget (`rota.http.metrics.Budget`), and the waiting codes are `DomainCode` members.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rota.application.queries.capacity import CapacityView

Admit = Callable[[GaugeMetricFamily | CounterMetricFamily, list[str], float], bool]
LABELS = 32  # keys (and buckets) with a label of their own; the rest are `other`
OTHER = "other"


def bounded(names: list[str], limit: int) -> dict[str, str]:
    """Each of `names` (busiest first) to its label: itself for the first `limit`, else
    `other`."""
    return {name: name if index < limit else OTHER for index, name in enumerate(names)}


def families(capacity: CapacityView, admit: Admit, labels: int = LABELS) -> Iterator[Metric]:
    """The flow-control families (see the module docstring)."""
    waiting = GaugeMetricFamily(
        "rota_works_waiting",
        "Ready Work the daemon's last start pass held back, by code",
        labels=["code"],
    )
    codes = Counter(item.code for item in capacity.waiting)
    for code in sorted(codes):
        admit(waiting, [code], codes[code])
    yield waiting

    paused = GaugeMetricFamily(
        "rota_flow_paused", "Paused pools, keys and scopes, by kind", labels=["target"]
    )
    kinds = Counter(p.target for p in capacity.paused)
    for kind in ("pool", "key", "scope"):
        admit(paused, [kind], kinds[kind])
    yield paused

    keys = capacity.keys
    busiest = sorted(keys, key=lambda k: (-keys[k].in_use, -keys[k].waiting, k))
    label = bounded(busiest, labels)
    in_use = GaugeMetricFamily(
        "rota_key_in_use", "Attempts holding a slot under a concurrency key", labels=["key"]
    )
    limit = GaugeMetricFamily(
        "rota_key_limit", "A concurrency key's limit (summed under `other`)", labels=["key"]
    )
    key_waiting = GaugeMetricFamily(
        "rota_key_waiting", "Ready Work a key's limit held back on the last pass", labels=["key"]
    )
    sums: dict[str, list[int]] = {}
    for key in busiest:
        use = keys[key]
        row = sums.setdefault(label[key], [0, 0, 0])
        row[0] += use.in_use
        row[1] += use.limit
        row[2] += use.waiting
    for name, (used, ceiling, held) in sums.items():
        admit(in_use, [name], used)
        admit(limit, [name], ceiling)
        admit(key_waiting, [name], held)
    yield from (in_use, limit, key_waiting)

    buckets = capacity.buckets
    emptiest = sorted(buckets, key=lambda b: (buckets[b].tokens, b))
    label = bounded(emptiest, labels)
    tokens = GaugeMetricFamily(
        "rota_rate_tokens", "Tokens in a rate bucket now (summed under `other`)", labels=["bucket"]
    )
    burst = GaugeMetricFamily(
        "rota_rate_burst", "A rate bucket's burst (summed under `other`)", labels=["bucket"]
    )
    totals: dict[str, list[float]] = {}
    for name in emptiest:
        bucket = buckets[name]
        row_f = totals.setdefault(label[name], [0.0, 0.0])
        row_f[0] += bucket.tokens
        row_f[1] += bucket.burst
    for name, (have, most) in totals.items():
        admit(tokens, [name], have)
        admit(burst, [name], most)
    yield from (tokens, burst)


__all__ = ["LABELS", "OTHER", "bounded", "families"]
