-- 0002: the read models, as the code of b8b96e5 created them at start-up (idempotent, so a
-- database made by that code is only recorded). A projection's tables are declared again
-- by its ``create`` (projections/*/projection.py) for a rebuild's shadow schema; the test
-- tests/integration/test_migrations.py checks the two agree.

-- Each projection's position (eventsourcing's single-row tracking table, and the row the
-- library writes when it creates one).
CREATE TABLE IF NOT EXISTS memwarden.projection_tracking (
    application_name text,
    notification_id bigint,
    PRIMARY KEY (application_name)
) WITH (autovacuum_enabled = true, autovacuum_vacuum_threshold = 100000000, autovacuum_vacuum_scale_factor = 0.5,
      autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.01);
INSERT INTO memwarden.projection_tracking (application_name, notification_id) VALUES ('__migration__', 1)
    ON CONFLICT (application_name) DO NOTHING;

-- Where a projection stopped, for every process to report (projections/runner.py).
CREATE TABLE IF NOT EXISTS memwarden.projection_errors (
    name text PRIMARY KEY,
    position bigint NOT NULL,
    error text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);

-- pgvector: the search index's halfvec embeddings.
CREATE EXTENSION IF NOT EXISTS vector;

-- the memory_objects projection
CREATE TABLE IF NOT EXISTS memwarden.memory_objects (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    actor text NOT NULL,
    scope text NOT NULL,
    type text NOT NULL,
    content text,
    subject text,
    attribute text,
    value text,
    tags text[] NOT NULL DEFAULT '{}',
    selectors text[] NOT NULL DEFAULT '{}',
    provenance jsonb NOT NULL,
    trust_rank int NOT NULL,
    event_time timestamptz,
    recorded_at timestamptz NOT NULL,
    valid_from timestamptz NOT NULL,
    valid_to timestamptz,
    retired_at timestamptz,
    status text NOT NULL,
    trust_tier text NOT NULL,
    supersedes uuid[] NOT NULL DEFAULT '{}',
    superseded_by uuid[] NOT NULL DEFAULT '{}',
    classification jsonb NOT NULL,
    verifications jsonb NOT NULL DEFAULT '[]',
    dispute_id uuid,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS memory_objects_current ON memwarden.memory_objects (namespace, recorded_at) WHERE status = 'active' AND retired_at IS NULL;

CREATE INDEX IF NOT EXISTS memory_objects_subject ON memwarden.memory_objects (namespace, subject);

-- columns added after the table first shipped
ALTER TABLE memwarden.memory_objects ADD COLUMN IF NOT EXISTS erasure_keys text[] NOT NULL DEFAULT '{}';

CREATE INDEX IF NOT EXISTS memory_objects_erasure_keys ON memwarden.memory_objects USING gin (erasure_keys);

ALTER TABLE memwarden.memory_objects ADD COLUMN IF NOT EXISTS erased_in_quarantine boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS memwarden.memory_supersedence (
    old_id uuid NOT NULL,
    new_id uuid NOT NULL,
    kind text NOT NULL,
    reason text NOT NULL,
    at timestamptz NOT NULL,
    valid_to timestamptz,
    position bigint NOT NULL,
    PRIMARY KEY (old_id, new_id)
);

CREATE INDEX IF NOT EXISTS memory_supersedence_new ON memwarden.memory_supersedence (new_id);

-- the disputes projection

CREATE TABLE IF NOT EXISTS memwarden.disputes (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    memory_id uuid NOT NULL,
    incumbent_id uuid NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    decision text,
    reviewer text,
    resolution_reason text,
    replacement_id uuid,
    opened_at timestamptz NOT NULL,
    resolved_at timestamptz,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS disputes_open ON memwarden.disputes (namespace) WHERE status = 'open';

-- the keys projection

CREATE TABLE IF NOT EXISTS memwarden.api_keys (
    key_id text PRIMARY KEY,
    key_hash text NOT NULL,
    namespace text NOT NULL,
    actor text NOT NULL,
    role text NOT NULL,
    issued_by text NOT NULL,
    issued_at timestamptz NOT NULL,
    revoked boolean NOT NULL DEFAULT false,
    revoked_at timestamptz,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS api_keys_namespace ON memwarden.api_keys (namespace);

-- the audit projection

CREATE TABLE IF NOT EXISTS memwarden.audit_records (
    position bigint PRIMARY KEY,
    record_id uuid NOT NULL,
    time timestamptz NOT NULL,
    actor text NOT NULL,
    namespace text NOT NULL,
    role text NOT NULL,
    op text NOT NULL,
    outcome text NOT NULL,
    detail text NOT NULL,
    subject_ids uuid[] NOT NULL DEFAULT '{}'
);

CREATE INDEX IF NOT EXISTS audit_records_namespace ON memwarden.audit_records (namespace text_pattern_ops, position);

-- the shares projection

CREATE TABLE IF NOT EXISTS memwarden.shares (
    share_id uuid PRIMARY KEY,
    memory_id uuid NOT NULL,
    memory_namespace text NOT NULL,
    namespace text NOT NULL,
    shared_by text NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS shares_namespace ON memwarden.shares (namespace, memory_id);

CREATE TABLE IF NOT EXISTS memwarden.pins (
    namespace text NOT NULL,
    memory_id uuid NOT NULL,
    pinned_by text NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (namespace, memory_id)
);

-- the memory_timeline projection

CREATE TABLE IF NOT EXISTS memwarden.memory_timeline (
    memory_id uuid NOT NULL,
    namespace text NOT NULL,
    status text NOT NULL,
    trust_tier text NOT NULL,
    recorded_at timestamptz NOT NULL,
    valid_from timestamptz NOT NULL,
    valid_to timestamptz,
    retired_at timestamptz,
    opened bigint NOT NULL,
    closed bigint,
    sys_from timestamptz NOT NULL,
    sys_to timestamptz,
    PRIMARY KEY (memory_id, opened)
);

CREATE INDEX IF NOT EXISTS memory_timeline_asof ON memwarden.memory_timeline (namespace, opened) INCLUDE (closed, valid_from, valid_to) WHERE status = 'active' AND retired_at IS NULL;

CREATE INDEX IF NOT EXISTS memory_timeline_open ON memwarden.memory_timeline (memory_id) WHERE closed IS NULL;

CREATE TABLE IF NOT EXISTS memwarden.ledger_clock (
    position bigint PRIMARY KEY,
    at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS ledger_clock_at ON memwarden.ledger_clock (at);

-- the search_index projection

CREATE TABLE IF NOT EXISTS memwarden.search_docs (
    ref uuid PRIMARY KEY,
    kind text NOT NULL,
    namespace text NOT NULL,
    model text,
    embedding halfvec,
    length int NOT NULL,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS search_docs_scope ON memwarden.search_docs (namespace, kind, model) INCLUDE (ref, embedding);

CREATE INDEX IF NOT EXISTS search_docs_order ON memwarden.search_docs (namespace, kind, position) INCLUDE (ref);

CREATE TABLE IF NOT EXISTS memwarden.search_postings (
    term text NOT NULL,
    ref uuid NOT NULL,
    namespace text NOT NULL,
    kind text NOT NULL,
    tf int NOT NULL,
    length int NOT NULL,
    PRIMARY KEY (ref, term)
);

CREATE INDEX IF NOT EXISTS search_postings_term ON memwarden.search_postings (kind, term, namespace) INCLUDE (ref, tf, length);

CREATE TABLE IF NOT EXISTS memwarden.search_terms (
    namespace text NOT NULL,
    kind text NOT NULL,
    term text NOT NULL,
    df int NOT NULL,
    PRIMARY KEY (namespace, kind, term)
);

CREATE TABLE IF NOT EXISTS memwarden.search_stats (
    namespace text NOT NULL,
    kind text NOT NULL,
    docs bigint NOT NULL,
    total_length bigint NOT NULL,
    PRIMARY KEY (namespace, kind)
);

CREATE TABLE IF NOT EXISTS memwarden.knowledge_documents (
    document_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    slug text NOT NULL,
    version int NOT NULL,
    title text NOT NULL,
    tags text[] NOT NULL,
    content_hash text NOT NULL,
    source text NOT NULL,
    published_by text NOT NULL,
    published_at timestamptz NOT NULL,
    position bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS memwarden.knowledge_chunks (
    ref uuid PRIMARY KEY,
    document_id uuid NOT NULL,
    version int NOT NULL,
    ordinal int NOT NULL,
    heading text NOT NULL,
    text text NOT NULL
);

CREATE INDEX IF NOT EXISTS knowledge_chunks_document ON memwarden.knowledge_chunks (document_id);

-- the access projection

CREATE TABLE IF NOT EXISTS memwarden.memory_access (
    memory_id uuid PRIMARY KEY,
    last_used timestamptz,
    use_count int NOT NULL DEFAULT 0,
    fault_count int NOT NULL DEFAULT 0
);

CREATE INDEX IF NOT EXISTS memory_access_recent ON memwarden.memory_access (last_used);

CREATE TABLE IF NOT EXISTS memwarden.context_faults (
    fault_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    actor text NOT NULL,
    tier text NOT NULL,
    score float8 NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS context_faults_namespace ON memwarden.context_faults (namespace);

-- the autopilot projection

CREATE TABLE IF NOT EXISTS memwarden.findings (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    memory_a uuid NOT NULL,
    memory_b uuid NOT NULL,
    judge text NOT NULL,
    rule text NOT NULL,
    explanation text NOT NULL,
    cosine double precision NOT NULL,
    status text NOT NULL,
    decision text,
    reviewer text,
    resolution_reason text,
    opened_at timestamptz NOT NULL,
    resolved_at timestamptz,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS findings_open ON memwarden.findings (namespace) WHERE status = 'open';

CREATE TABLE IF NOT EXISTS memwarden.autopilot_decisions (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    winner uuid NOT NULL,
    loser uuid NOT NULL,
    judge text NOT NULL,
    rule text NOT NULL,
    explanation text NOT NULL,
    dial text NOT NULL,
    status text NOT NULL,
    reviewer text,
    overturn_reason text,
    restored uuid,
    settled_at timestamptz NOT NULL,
    overturned_at timestamptz,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS autopilot_decisions_namespace ON memwarden.autopilot_decisions (namespace);

CREATE TABLE IF NOT EXISTS memwarden.autopilot_judged (
    memory_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    outcome text NOT NULL,
    judge text,
    pairs int NOT NULL,
    contradictions int NOT NULL,
    position bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS memwarden.proposals (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    kind text NOT NULL,
    sources uuid[] NOT NULL,
    canonical uuid NOT NULL,
    drafter text NOT NULL,
    status text NOT NULL,
    edited boolean NOT NULL,
    reviewer text,
    document_id uuid,
    drafted_at timestamptz NOT NULL,
    reviewed_at timestamptz,
    position bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS proposals_pending ON memwarden.proposals (namespace) WHERE status = 'pending_review';

CREATE TABLE IF NOT EXISTS memwarden.autopilot_leases (
    id uuid PRIMARY KEY,
    pass_name text NOT NULL,
    namespace text NOT NULL,
    holder text NOT NULL,
    token bigint NOT NULL,
    released boolean NOT NULL,
    takeovers bigint NOT NULL
);

-- The as-of engine's snapshots (projections/replay.py).
CREATE TABLE IF NOT EXISTS memwarden.replay_snapshots (
    position bigint PRIMARY KEY,
    high_at timestamptz NOT NULL,
    memories int NOT NULL,
    state bytea NOT NULL,
    made_at timestamptz NOT NULL DEFAULT now()
);
