-- 0008: no WAL flush under a lock shared between tenants (deploy/SCALE.md §3).
--
-- Measured with `memwarden bench write --tenants 8 --writers-per-tenant 2` (pg_stat_statements,
-- pg_stat_activity samples): a tenant-chain append spent most of its time waiting for the
-- sequence lock, whose holder kept it through its commit's WAL flush; and every append of
-- either mode announced itself with pg_notify inside its own transaction, whose commit takes
-- PostgreSQL's notify queue lock, ONE lock for the whole server (every database of it), held
-- through that commit's flush. Even tenants on databases of their own waited on each other
-- there (57% of the sampled sessions).
--
-- Now no lock shared between tenants is held through a flush:
--
-- * Chain per tenant, mw_append_tenant_sequenced: (1) the tenant's append, committed durably,
--   under the tenant's head row only; (2) the global sequencing with synchronous_commit off,
--   so the sequence lock (and the notify lock) is released as soon as the commit record is
--   written, not flushed; (3) a flush of the WAL up to there (a transaction writing one
--   empty logical message, committed durably), outside every shared lock, before the
--   positions are returned.
--   A sequencing lost in a crash between (2) and (3) never answered anyone: its rows are
--   pending again, and the next sequencing (at the latest the projection runner's at
--   start-up) sequences them. Anything durable that read a sequencing (a projection's
--   tracking, a single-chain append, a checkpoint) was committed after it, so its flush
--   made the sequencing durable first: WAL is flushed in order.
-- * Single chain, mw_append_announced: the append committed durably (under the sequence
--   lock, as before), then its announcement in a transaction of its own, with
--   synchronous_commit off: the notify lock is no longer held through a flush.

-- The single-chain append of 0005, without its announcement (the caller announces it).
CREATE OR REPLACE FUNCTION memwarden.mw_append_quiet(
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[])
RETURNS TABLE(grp int, pos bigint)
LANGUAGE plpgsql AS $body$
DECLARE
    head_pos bigint;
    head_hash bytea;
    r record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('memwarden ledger sequence'));
    IF EXISTS (SELECT 1 FROM memwarden.tenant_pending) THEN
        PERFORM memwarden.mw_sequence_pending();
    END IF;
    SELECT c.position, c.hash INTO head_pos, head_hash
      FROM memwarden.ledger_chain c ORDER BY c.position DESC LIMIT 1;
    IF head_pos IS NULL THEN
        head_pos := 0;
        head_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;
    SELECT * INTO r FROM memwarden.mw_insert_groups(NULL, head_pos, head_hash, p_ids, p_versions, p_topics, p_states,
                                                   p_groups, p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                                   p_destroy_ids, p_destroy_groups);
    RETURN QUERY SELECT * FROM memwarden.mw_positions(head_pos, r.appended, r.bad);
END
$body$;

-- mw_append (0005) as it was for a caller in one transaction: the append and its announcement.
CREATE OR REPLACE FUNCTION memwarden.mw_append(
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[])
RETURNS TABLE(grp int, pos bigint)
LANGUAGE plpgsql AS $body$
BEGIN
    PERFORM pg_notify('events', '');
    RETURN QUERY SELECT * FROM memwarden.mw_append_quiet(p_ids, p_versions, p_topics, p_states, p_groups,
                                                         p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                                         p_destroy_ids, p_destroy_groups);
END
$body$;

-- Single chain in one round trip: the append, committed durably; then its announcement,
-- committed without waiting for a flush. Returns the groups and positions mw_append would.
CREATE OR REPLACE PROCEDURE memwarden.mw_append_announced(
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[],
    INOUT r_groups int[] DEFAULT NULL, INOUT r_positions bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $body$
BEGIN
    SELECT array_agg(a.grp), array_agg(a.pos) INTO r_groups, r_positions
      FROM memwarden.mw_append_quiet(p_ids, p_versions, p_topics, p_states, p_groups,
                                     p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                     p_destroy_ids, p_destroy_groups) AS a;
    COMMIT;
    SET LOCAL synchronous_commit = off;
    PERFORM pg_notify('events', '');
END
$body$;

-- Chain per tenant in one round trip (replaces 0005's): the append, committed durably; the
-- sequencing, committed without a flush under the shared locks; then the flush, outside them.
-- Returns, for each event of the arrays in their order, its global position, NULL for the
-- events of a refused group.
CREATE OR REPLACE PROCEDURE memwarden.mw_append_tenant_sequenced(
    p_tenant text,
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[],
    INOUT r_positions bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $body$
DECLARE
    refused int[];
BEGIN
    SELECT coalesce(array_agg(a.grp) FILTER (WHERE a.pos IS NULL), '{}') INTO refused
      FROM memwarden.mw_append_tenant(p_tenant, p_ids, p_versions, p_topics, p_states, p_groups,
                                      p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                      p_destroy_ids, p_destroy_groups) AS a;
    COMMIT;
    SET LOCAL synchronous_commit = off;
    SELECT array_agg(s.notification_id ORDER BY u.ord) INTO r_positions
      FROM unnest(p_ids, p_versions, p_groups) WITH ORDINALITY AS u(id, ver, g, ord)
      LEFT JOIN memwarden.mw_sequence_for(
                    ARRAY(SELECT v.id FROM unnest(p_ids, p_groups) AS v(id, g) WHERE NOT (v.g = ANY(refused))),
                    ARRAY(SELECT v.ver FROM unnest(p_versions, p_groups) AS v(ver, g) WHERE NOT (v.g = ANY(refused)))
                ) AS s ON s.originator_id = u.id AND s.originator_version = u.ver AND NOT (u.g = ANY(refused));
    COMMIT;
    -- The flush: a durable commit flushes the WAL up to its commit record, so every
    -- sequencing committed before (ours, or another's that sequenced our events) is durable
    -- before the positions are returned. It must write WAL to flush at all: a transaction
    -- that only took an id commits without waiting (measured: pg_current_xact_id() left
    -- pg_current_wal_flush_lsn() behind 50 times in 50). A logical message, empty, is one
    -- WAL record (any wal_level, any role; nothing reads it unless a logical decoder).
    PERFORM pg_logical_emit_message(true, 'memwarden', '');
END
$body$;
