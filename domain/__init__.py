"""rota's pure domain: events, state, decisions and policies.

Nothing here reads a clock, a file, a socket or a random source, and nothing here imports
another rota layer: decisions receive `now` and return events; folds read time only from
events. `tests/unit/test_architecture.py` enforces it.
"""
