"""What the HTTP views that count every Work cost on one store: `/metrics` scraped twice
(the collector `rota serve` and `rota run --http` register), then the web view's overview
and `GET /v1/holds`, called in this process as the routes call them. `bench.memory` runs it
in a fresh process per store (its peak RSS is that column); alone:

    python -m bench.http_counts STORE    # prints the seconds each took
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

import rota
from rota.http.context import ApiContext
from rota.http.metrics import registry
from rota.http.routes.system import holds
from rota.http.tokens import TokenFile
from rota.http.web.views import overview
from rota.infrastructure.config import HttpModel


def main(store: str) -> None:
    with rota.open(store) as scheduler, tempfile.TemporaryDirectory() as scratch:
        metrics = registry(scheduler, budget=1024, scope_depth=2)
        context = ApiContext(
            scheduler=scheduler,
            tokens=TokenFile.load(Path(scratch) / "tokens.json", missing_ok=True),
            settings=HttpModel(),
            metrics=metrics,
        )
        timings = []
        for _ in range(2):
            started = time.perf_counter()
            generate_latest(metrics)
            timings.append(time.perf_counter() - started)
        started = time.perf_counter()
        total = overview(context)["total"]
        held = len(holds(context).holds)
        timings.append(time.perf_counter() - started)
        print(
            f"scrapes {timings[0]:.2f} s, {timings[1]:.2f} s; overview ({total:,} Works) and "
            f"holds ({held}) {timings[2]:.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1])
