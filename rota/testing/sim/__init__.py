"""The deterministic simulator of the whole engine (issue 29)."""
