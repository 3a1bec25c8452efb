"""rota.testing: the deterministic simulator and the time-skipping test kit."""
