"""Executors: plugins that launch, observe, stop (and optionally inject into) attempts."""
