"""The command groups over `Transactions`: each decides with `rota.domain` and appends
through the one transaction loop (DESIGN.md, "The flow of one transition").

- `lifecycle`: starts, fenced writes of an attempt, outcomes, timers, on `submissions`
  (Work and input, the bindings a daemon serves; `lifecycle_values`: the values they take
  and return);
- `recovery`: recover expired attempts, lose, adopt, release holds;
- `admission`: budgets, ledgers, gates, cancellation outside the start pass;
- `flow`: an operator's priority changes, pauses and resumes of pools, keys and scopes;
- `control`: inject, interrupt, dispatch passes and answers;
- `schedules`: define, pause, resume, remove, trigger, backfill, and the fires;
- `requests`: an operator request's id recorded as the delivery identity of the event
  that answers it, so a repeat is answered from the log (the others call it);
- `waits`: named wait predicates, and the verdicts they record for parked attempts.

`SchedulerService` (`rota.application.service`) composes them. Reads are not here: every
read model is a query of `rota.application.queries`.
"""
