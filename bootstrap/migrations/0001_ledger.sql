-- 0001: the ledger, as the code of b8b96e5 (the last without migrations) created it at
-- start-up. Every statement is idempotent: on a database made by that code it changes
-- nothing, and it is recorded as applied (the baseline).

CREATE SCHEMA IF NOT EXISTS memwarden;

-- eventsourcing's application recorder (PostgresApplicationRecorder, events table "events",
-- uuid originator ids), exactly as the library declares it; the library's own table
-- creation is off (CREATE_TABLE=no in domain/ledger/app.py).
CREATE TABLE IF NOT EXISTS memwarden.events (
    originator_id uuid NOT NULL,
    originator_version bigint NOT NULL,
    topic text,
    state bytea,
    notification_id bigserial,
    PRIMARY KEY (originator_id, originator_version)
) WITH (autovacuum_enabled = true, autovacuum_vacuum_threshold = 100000000, autovacuum_vacuum_scale_factor = 0.5,
      autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.01);

DO $$
BEGIN
    IF to_regtype('memwarden.stored_event_uuid') IS NULL THEN
        CREATE TYPE memwarden.stored_event_uuid AS (originator_id uuid, originator_version bigint, topic text, state bytea);
    END IF;
END
$$;

CREATE UNIQUE INDEX IF NOT EXISTS events_notification_id_idx ON memwarden.events (notification_id ASC);

CREATE OR REPLACE FUNCTION memwarden.es_insert_events_uuid(events memwarden.stored_event_uuid[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $BODY$BEGIN    SET LOCAL lock_timeout = '0s';    NOTIFY "events";    RETURN QUERY    INSERT INTO memwarden.events AS t (    originator_id, originator_version, topic, state)    SELECT originator_id, originator_version, topic, state    FROM unnest(events)    RETURNING notification_id;END;$BODY$;

-- The hash chain, the sealed data keys, the signing keys' public halves, the service
-- secrets, and the one append function every write goes through (domain/ledger/recorder.py).
CREATE TABLE IF NOT EXISTS memwarden.ledger_chain ( position bigint PRIMARY KEY, hash bytea NOT NULL);

CREATE TABLE IF NOT EXISTS memwarden.data_keys ( memory_id uuid PRIMARY KEY, kek_id text NOT NULL, wrapped bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now());

CREATE TABLE IF NOT EXISTS memwarden.signing_keys ( key_id text PRIMARY KEY, public_key bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now());

CREATE TABLE IF NOT EXISTS memwarden.secrets ( name text PRIMARY KEY, kek_id text NOT NULL, wrapped bytea NOT NULL);

-- the append function's signature before erasure added p_destroy_ids, p_destroy_groups
DROP FUNCTION IF EXISTS memwarden.mw_append(uuid[], bigint[], text[], bytea[], int[], uuid[], int[], text[], bytea[]);

CREATE OR REPLACE FUNCTION memwarden.mw_append(
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[])
RETURNS TABLE(grp int, pos bigint)
LANGUAGE plpgsql AS $body$
DECLARE
    bad int[] := '{}';
    head_pos bigint;
    head_hash bytea;
    at_pos bigint;
    h bytea;
    topic_bytes bytea;
    hashes bytea[];
    appended int[];
    r record;
    i int;
    attempt int;
BEGIN
    LOCK TABLE memwarden.events IN EXCLUSIVE MODE;
    PERFORM pg_notify('events', '');
    SELECT c.position, c.hash INTO head_pos, head_hash
      FROM memwarden.ledger_chain c ORDER BY c.position DESC LIMIT 1;
    IF head_pos IS NULL THEN
        head_pos := 0;
        head_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;
    -- Arrays are walked with unnest, never subscripted in a loop: subscripting an array
    -- of variable-length values costs O(n) per access.
    FOR attempt IN 1 .. 2 LOOP
        hashes := '{}';
        appended := '{}';
        at_pos := head_pos;
        h := head_hash;
        FOR r IN
            SELECT u.id, u.ver, u.topic, u.state, u.g
              FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
                   WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
             WHERE NOT (u.g = ANY(bad))
             ORDER BY u.ord
        LOOP
            at_pos := at_pos + 1;
            topic_bytes := convert_to(r.topic, 'UTF8');
            h := sha256(h || int8send(at_pos) || uuid_send(r.id) || int8send(r.ver)
                        || int4send(octet_length(topic_bytes)) || topic_bytes
                        || int4send(octet_length(r.state)) || r.state);
            hashes := array_append(hashes, h);
            appended := array_append(appended, r.g);
        END LOOP;
        BEGIN
            -- Optimistic concurrency: a stream version already taken violates the primary
            -- key. Rare, so the common path does no lookups; the rare one finds the groups.
            INSERT INTO memwarden.events (notification_id, originator_id, originator_version, topic, state)
            SELECT head_pos + row_number() OVER (ORDER BY u.ord), u.id, u.ver, u.topic, u.state
              FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
                   WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
             WHERE NOT (u.g = ANY(bad));
            INSERT INTO memwarden.ledger_chain (position, hash)
            SELECT head_pos + x.o, x.hh FROM unnest(hashes) WITH ORDINALITY AS x(hh, o);
            IF cardinality(p_key_ids) > 0 THEN
                INSERT INTO memwarden.data_keys (memory_id, kek_id, wrapped)
                SELECT k.id, k.kek, k.wrapped
                  FROM unnest(p_key_ids, p_key_groups, p_key_keks, p_key_wrapped) AS k(id, g, kek, wrapped)
                 WHERE NOT (k.g = ANY(bad))
                ON CONFLICT (memory_id) DO NOTHING;
            END IF;
            IF cardinality(p_destroy_ids) > 0 THEN
                -- Crypto-shredding: the erased memories' keys go in the same transaction
                -- as their MemoryErased events, or not at all.
                DELETE FROM memwarden.data_keys d
                 USING unnest(p_destroy_ids, p_destroy_groups) AS k(id, g)
                 WHERE d.memory_id = k.id AND NOT (k.g = ANY(bad));
            END IF;
            EXIT;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 2 THEN
                RAISE;
            END IF;
            SELECT coalesce(array_agg(DISTINCT u.g), '{}') INTO bad
              FROM unnest(p_ids, p_versions, p_groups) AS u(id, ver, g)
             WHERE EXISTS (SELECT 1 FROM memwarden.events e
                            WHERE e.originator_id = u.id AND e.originator_version = u.ver);
        END;
    END LOOP;
    FOR i IN 1 .. cardinality(appended) LOOP
        grp := appended[i];
        pos := head_pos + i;
        RETURN NEXT;
    END LOOP;
    FOREACH grp IN ARRAY bad LOOP
        pos := NULL;
        RETURN NEXT;
    END LOOP;
END
$body$;
