"""rota.application: the ports, the application service and the host cadence.

`ports` declares every contract the adapters in `rota.infrastructure` implement (the event
store, the projection store, executors, the clock, start gates, run-environment hooks).
`service.SchedulerService` composes the transaction loop (`transactions`) with the
command groups (`lifecycle`, `recovery`, `admission`, `control`); `host.Host` drives it
with its cadence steps (`host_steps`). Nothing here opens a file, a socket or a database:
what it needs is handed to it by the composition root (`rota.bootstrap`).
"""
