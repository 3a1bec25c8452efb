"""PostgreSQL adapters (psycopg 3): the event store and the projections in the log's schema."""
