"""The rota log as eventsourcing persistence modules (SQLite and PostgreSQL recorders)."""
