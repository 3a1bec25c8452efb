"""rota's side effects: stores, codec, clock, executors, host loop, config, CLI."""
