-- baton's store, version 2: many instances on one database. Each instance registers itself and
-- heartbeats; an instance that stops heartbeating is marked gone by the others, and the calls it
-- held (calls.instance_id) are ended as failed. Times as in version 1: ms since the Unix epoch.

CREATE TABLE instances (
    id            TEXT PRIMARY KEY,
    url           TEXT NOT NULL,      -- the origin bridges reach this instance at (advertise_url)
    capacity      BIGINT NOT NULL,    -- limits.max_calls
    active_calls  BIGINT NOT NULL,
    state         TEXT NOT NULL
                  CHECK (state IN ('ready', 'full', 'draining', 'gone', 'stopped')),
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL     -- the database's clock, never the instance's
);

-- Which instance holds (or held) a call.
ALTER TABLE calls ADD COLUMN instance_id TEXT;
CREATE INDEX calls_instance_open_idx ON calls (instance_id) WHERE ended_at IS NULL;
