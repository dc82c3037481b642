-- baton's store, version 1. One schema for SQLite and PostgreSQL: only types both understand
-- (TEXT, BIGINT, DOUBLE PRECISION), ids made by baton (no sequences), times in milliseconds
-- since the Unix epoch, JSON kept as TEXT. No foreign keys: writes may be shed under load (the
-- audio path never waits for the store), and a shed call row must not make its lines fail.

CREATE TABLE calls (
    id          TEXT PRIMARY KEY,
    caller      TEXT,               -- the caller's identity (Twilio `From`, a custom parameter)
    leg         TEXT NOT NULL,      -- twilio, fixture, ...
    agent_set   TEXT,
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT,
    end_reason  TEXT,
    figures     TEXT,               -- JSON: the call's figures (first_audio_ms, underruns, ...)
    recording   TEXT                -- path of the stereo WAV, if one was written
);
CREATE INDEX calls_caller_started_idx ON calls (caller, started_at);

-- Each line tagged with who spoke (caller | agent) and the agent speaking or listening.
CREATE TABLE transcript_lines (
    call_id TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    role    TEXT NOT NULL,
    agent   TEXT NOT NULL,
    text    TEXT NOT NULL,
    at_ms   BIGINT NOT NULL,
    PRIMARY KEY (call_id, seq)
);

-- The call's agent history: one row per activation.
CREATE TABLE agent_history (
    call_id            TEXT NOT NULL,
    seq                BIGINT NOT NULL,
    agent              TEXT NOT NULL,
    activated_at_ms    BIGINT NOT NULL,
    deactivated_at_ms  BIGINT,
    message_count      BIGINT NOT NULL,
    activation_summary TEXT NOT NULL,
    PRIMARY KEY (call_id, seq)
);

CREATE TABLE tool_calls (
    call_id  TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    agent    TEXT NOT NULL,
    tool     TEXT NOT NULL,
    call_ref TEXT NOT NULL,          -- the model's function-call id
    turn     BIGINT NOT NULL,
    allowed  BIGINT NOT NULL,        -- 1: run, 0: refused by the tool filter
    args     TEXT,                   -- JSON
    error    TEXT,
    at_ms    BIGINT NOT NULL,
    PRIMARY KEY (call_id, seq)
);

-- Handoffs with their figures (handoff_gap_ms as heard by the caller).
CREATE TABLE handoffs (
    call_id                TEXT NOT NULL,
    seq                    BIGINT NOT NULL,
    from_agent             TEXT NOT NULL,
    to_agent               TEXT NOT NULL,
    strategy               TEXT NOT NULL,
    trigger_kind           TEXT NOT NULL,
    gap_ms                 DOUBLE PRECISION,
    announcement_queued_ms DOUBLE PRECISION,
    trigger_to_wire_ms     DOUBLE PRECISION,
    heard_at_ms            DOUBLE PRECISION,
    at_ms                  BIGINT NOT NULL,
    PRIMARY KEY (call_id, seq)
);

-- Seed 001's conversation_contexts: which agent works for a caller, why it was brought in, and
-- its working state, across calls.
CREATE TABLE agent_contexts (
    id                  TEXT PRIMARY KEY,
    caller              TEXT NOT NULL,
    agent               TEXT NOT NULL,
    activation_summary  TEXT NOT NULL,   -- the router's summary of why the agent was activated
    activation_call_id  TEXT,            -- the call it was activated in ...
    activation_position BIGINT,          -- ... and the transcript line (seq) it was activated at
    context_data        TEXT NOT NULL DEFAULT '{}',   -- JSON: the agent's working state
    status              TEXT NOT NULL DEFAULT 'active'
                        CHECK (status IN ('active', 'paused', 'completed')),
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    completed_at        BIGINT
);
-- At most one active context per caller.
CREATE UNIQUE INDEX agent_contexts_caller_active_idx ON agent_contexts (caller) WHERE status = 'active';
CREATE INDEX agent_contexts_caller_created_idx ON agent_contexts (caller, created_at DESC);
