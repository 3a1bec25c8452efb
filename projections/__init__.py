"""rota's projections: deterministic folds over the log (scheduler, capacity, history ...)."""
