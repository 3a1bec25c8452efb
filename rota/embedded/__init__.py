"""The embedded API's helpers: what `rota.Scheduler` (`rota/scheduler.py`) and `rota.open`
are made of. Import the public names from `rota`; these modules are not an API.

- `opening`: `rota.open` (a URL or path -> a `Scheduler`);
- `reads`: the Scheduler's read half, over `rota.application.queries`;
- `submitting`, `submissions`, `handles`: the submit path and `WorkHandle`;
- `registering`, `registrations`, `bindings`: `register()`, `bind()` and their checks;
- `schedule_api`: `scheduler.schedules` (define, pause, trigger, next, history, explain);
- `async_executors`: the event loop thread `async def` callables run on.
"""
