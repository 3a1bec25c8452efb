"""SQLite adapters (apsw): the event store and the projection store in one file each."""
