"""The in-memory backend: the log, its projections and its locks in this process's memory
(`memory://name`, `memory://`); for tests and simulations, never for keeping decisions."""
