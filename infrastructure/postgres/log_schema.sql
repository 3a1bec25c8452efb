-- The log's tables in one schema (see `log_sql`): `ddl` fills in {schema} (a quoted
-- identifier) and {genesis} (the chain's genesis hash, a literal). Every statement is
-- idempotent: a store creates the schema it opens, under an advisory lock, if any is missing.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.events (
    position BIGINT PRIMARY KEY, stream TEXT NOT NULL, version BIGINT NOT NULL,
    type TEXT NOT NULL, type_version INTEGER NOT NULL, delivery_id TEXT UNIQUE,
    data TEXT, data_bytes BYTEA, recorded_at TEXT NOT NULL, hash TEXT NOT NULL,
    UNIQUE (stream, version), CHECK ((data IS NULL) <> (data_bytes IS NULL)));
CREATE TABLE IF NOT EXISTS {schema}.head (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    position BIGINT NOT NULL, hash TEXT NOT NULL);
INSERT INTO {schema}.head VALUES (TRUE, 0, {genesis}) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {schema}.rota_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.merkle_nodes (
    level SMALLINT NOT NULL, idx BIGINT NOT NULL, hash BYTEA NOT NULL,
    PRIMARY KEY (level, idx));
CREATE TABLE IF NOT EXISTS {schema}.tracking (
    application_name TEXT PRIMARY KEY, notification_id BIGINT NOT NULL);
