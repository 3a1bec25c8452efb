"""Replay: verify the log's hash chain, rebuild projections, travel to past moments."""
