-- 0005: one ledger chain per tenant, behind MEMWARDEN_LEDGER_CHAINS=tenant (deploy/SCALE.md §3, §6).
--
-- In tenant mode an append locks only its tenant's head row (tenant_heads), chains its
-- events onto the tenant's chain (tenant_chain) at the next gapless tenant positions, and
-- commits them with no global position yet (notification_id NULL: "pending"). A second,
-- short transaction, mw_sequence(), then gives every committed pending row the next
-- gapless global position and its global chain link, under ONE advisory lock held through
-- its commit: global positions still become visible in order and without gaps, so the
-- notification log, the projections, read-your-writes and the global chain are unchanged.
-- The global-mode mw_append takes the same advisory lock (instead of the table lock), so
-- processes of both modes never hand out the same position.

ALTER TABLE memwarden.events ALTER COLUMN notification_id DROP NOT NULL;
ALTER TABLE memwarden.events ADD COLUMN IF NOT EXISTS tenant text, ADD COLUMN IF NOT EXISTS tenant_position bigint;

-- A tenant position is taken once; global-mode rows (tenant NULL) are not in the index.
CREATE UNIQUE INDEX IF NOT EXISTS events_tenant_position_idx
    ON memwarden.events (tenant, tenant_position) WHERE tenant IS NOT NULL;

CREATE TABLE IF NOT EXISTS memwarden.tenant_chain (
    tenant text NOT NULL,
    position bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (tenant, position)
);

CREATE TABLE IF NOT EXISTS memwarden.tenant_heads (
    tenant text PRIMARY KEY,
    position bigint NOT NULL,
    hash bytea NOT NULL
);

-- How far each tenant's chain has been sequenced (given global positions): the pending rows
-- of a tenant are its tenant positions after this one, up to its head. Only the sequencer
-- (under the sequence lock) writes it, so it never waits on a tenant's head row. Why not a
-- partial index on "notification_id IS NULL": every sequenced row leaves a dead entry there,
-- and events is never vacuumed for dead rows (0001: it is append-only), so each look for
-- pending rows would read the whole history of pending rows again (measured: 2,716 dead
-- entries scanned per sequencing after 800 writes, the cost growing with every write).
CREATE TABLE IF NOT EXISTS memwarden.tenant_sequenced (
    tenant text PRIMARY KEY,
    position bigint NOT NULL
);

-- The tenants with pending rows: (tenant, sequenced up to, head), from one snapshot.
CREATE OR REPLACE VIEW memwarden.tenant_pending AS
    SELECT h.tenant, coalesce(s.position, 0) AS done, h.position AS upto
      FROM memwarden.tenant_heads h LEFT JOIN memwarden.tenant_sequenced s ON s.tenant = h.tenant
     WHERE h.position > coalesce(s.position, 0);

-- The links of events appended after (p_pos, p_hash), in the arrays' order: the chain
-- formula of the global chain (domain/ledger/chain.py), h_n = sha256(h_{n-1} || canonical).
-- Arrays are walked with unnest, never subscripted in a loop (O(n) per access).
CREATE OR REPLACE FUNCTION memwarden.mw_links(
    p_pos bigint, p_hash bytea, p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[])
RETURNS bytea[]
LANGUAGE plpgsql IMMUTABLE AS $body$
DECLARE
    hashes bytea[] := '{}';
    h bytea := p_hash;
    at_pos bigint := p_pos;
    topic_bytes bytea;
    r record;
BEGIN
    FOR r IN
        SELECT u.id, u.ver, u.topic, u.state
          FROM unnest(p_ids, p_versions, p_topics, p_states) WITH ORDINALITY AS u(id, ver, topic, state, ord)
         ORDER BY u.ord
    LOOP
        at_pos := at_pos + 1;
        topic_bytes := convert_to(r.topic, 'UTF8');
        h := sha256(h || int8send(at_pos) || uuid_send(r.id) || int8send(r.ver)
                    || int4send(octet_length(topic_bytes)) || topic_bytes
                    || int4send(octet_length(r.state)) || r.state);
        hashes := array_append(hashes, h);
    END LOOP;
    RETURN hashes;
END
$body$;

-- The groups of an append one of whose stream versions is already taken (optimistic
-- concurrency, reported per group).
CREATE OR REPLACE FUNCTION memwarden.mw_taken_groups(p_ids uuid[], p_versions bigint[], p_groups int[])
RETURNS int[]
LANGUAGE sql STABLE AS $body$
    SELECT coalesce(array_agg(DISTINCT u.g), '{}')
      FROM unnest(p_ids, p_versions, p_groups) AS u(id, ver, g)
     WHERE EXISTS (SELECT 1 FROM memwarden.events e WHERE e.originator_id = u.id AND e.originator_version = u.ver);
$body$;

-- The appended groups' data keys: new memories' stored, erased memories' deleted
-- (crypto-shredding: in the same transaction as their MemoryErased events, or not at all).
CREATE OR REPLACE FUNCTION memwarden.mw_store_keys(
    p_bad int[], p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[])
RETURNS void
LANGUAGE plpgsql AS $body$
BEGIN
    IF cardinality(p_key_ids) > 0 THEN
        INSERT INTO memwarden.data_keys (memory_id, kek_id, wrapped)
        SELECT k.id, k.kek, k.wrapped
          FROM unnest(p_key_ids, p_key_groups, p_key_keks, p_key_wrapped) AS k(id, g, kek, wrapped)
         WHERE NOT (k.g = ANY(p_bad))
        ON CONFLICT (memory_id) DO NOTHING;
    END IF;
    IF cardinality(p_destroy_ids) > 0 THEN
        DELETE FROM memwarden.data_keys d
         USING unnest(p_destroy_ids, p_destroy_groups) AS k(id, g)
         WHERE d.memory_id = k.id AND NOT (k.g = ANY(p_bad));
    END IF;
END
$body$;

-- Give every committed pending row the next global positions and links, and record how far
-- each tenant is sequenced. The caller holds
-- the sequence lock (hashtext('memwarden ledger sequence'), domain/ledger/locks.py) until
-- it commits. A tenant's rows keep their tenant order.
CREATE OR REPLACE FUNCTION memwarden.mw_sequence_pending()
RETURNS TABLE(originator_id uuid, originator_version bigint, notification_id bigint)
LANGUAGE plpgsql AS $body$
DECLARE
    head_pos bigint;
    head_hash bytea;
    t_tenants text[];
    t_done bigint[];
    t_upto bigint[];
    ids uuid[];
    vers bigint[];
    topics text[];
    states bytea[];
BEGIN
    -- a committed head names committed rows only: rows up to it are all there to sequence
    SELECT array_agg(p.tenant ORDER BY p.tenant), array_agg(p.done ORDER BY p.tenant),
           array_agg(p.upto ORDER BY p.tenant)
      INTO t_tenants, t_done, t_upto
      FROM memwarden.tenant_pending p;
    IF t_tenants IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(e.originator_id ORDER BY e.tenant, e.tenant_position),
           array_agg(e.originator_version ORDER BY e.tenant, e.tenant_position),
           array_agg(e.topic ORDER BY e.tenant, e.tenant_position),
           array_agg(e.state ORDER BY e.tenant, e.tenant_position)
      INTO ids, vers, topics, states
      FROM unnest(t_tenants, t_done, t_upto) AS p(tenant, done, upto)
      JOIN memwarden.events e
        ON e.tenant = p.tenant AND e.tenant_position > p.done AND e.tenant_position <= p.upto;
    SELECT c.position, c.hash INTO head_pos, head_hash
      FROM memwarden.ledger_chain c ORDER BY c.position DESC LIMIT 1;
    IF head_pos IS NULL THEN
        head_pos := 0;
        head_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;
    UPDATE memwarden.events e SET notification_id = head_pos + u.o
      FROM unnest(ids, vers) WITH ORDINALITY AS u(id, ver, o)
     WHERE e.originator_id = u.id AND e.originator_version = u.ver;
    INSERT INTO memwarden.ledger_chain (position, hash)
    SELECT head_pos + x.o, x.hh FROM unnest(memwarden.mw_links(head_pos, head_hash, ids, vers, topics, states))
           WITH ORDINALITY AS x(hh, o);
    INSERT INTO memwarden.tenant_sequenced (tenant, position)
    SELECT p.tenant, p.upto FROM unnest(t_tenants, t_upto) AS p(tenant, upto)
    ON CONFLICT (tenant) DO UPDATE SET position = excluded.position;
    PERFORM pg_notify('events', '');
    RETURN QUERY SELECT u.id, u.ver, head_pos + u.o FROM unnest(ids, vers) WITH ORDINALITY AS u(id, ver, o);
END
$body$;

CREATE OR REPLACE FUNCTION memwarden.mw_sequence()
RETURNS TABLE(originator_id uuid, originator_version bigint, notification_id bigint)
LANGUAGE plpgsql AS $body$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('memwarden ledger sequence'));
    RETURN QUERY SELECT * FROM memwarden.mw_sequence_pending();
END
$body$;

-- What a tenant-mode append calls after its commit: the global positions of its own events
-- (p_ids, p_versions), sequencing them only if no other sequencer has. Under N concurrent
-- appenders this matters: a caller whose events are still pending while another sequencer
-- runs waits for that one's commit (a shared wait on the same key, so every waiter wakes at
-- once) and then often finds them sequenced, instead of every caller queueing for the lock
-- and sequencing in turn, one commit after another.
CREATE OR REPLACE FUNCTION memwarden.mw_sequence_for(p_ids uuid[], p_versions bigint[])
RETURNS TABLE(originator_id uuid, originator_version bigint, notification_id bigint)
LANGUAGE plpgsql AS $body$
DECLARE
    lock_key bigint := hashtext('memwarden ledger sequence');
BEGIN
    IF memwarden.mw_any_pending(p_ids, p_versions) THEN
        IF pg_try_advisory_xact_lock(lock_key) THEN
            PERFORM memwarden.mw_sequence_pending();
        ELSE
            -- Another sequencer holds the lock: wait for its commit with every other waiter
            -- (a shared lock of the session, released at once; one cancelled in between is
            -- released too), then look again. Only if they are still pending (committed after
            -- that sequencer looked), queue for the lock itself. A bounded number of steps,
            -- no retry loop: a waiter that only tried the lock again could spin.
            BEGIN
                PERFORM pg_advisory_lock_shared(lock_key);
                PERFORM pg_advisory_unlock_shared(lock_key);
            EXCEPTION WHEN query_canceled OR others THEN
                PERFORM pg_advisory_unlock_shared(lock_key);
                RAISE;
            END;
            IF memwarden.mw_any_pending(p_ids, p_versions) THEN
                PERFORM pg_advisory_xact_lock(lock_key);
                IF memwarden.mw_any_pending(p_ids, p_versions) THEN
                    PERFORM memwarden.mw_sequence_pending();
                END IF;
            END IF;
        END IF;
    END IF;
    RETURN QUERY
        SELECT e.originator_id, e.originator_version, e.notification_id
          FROM unnest(p_ids, p_versions) AS u(id, ver)
          JOIN memwarden.events e ON e.originator_id = u.id AND e.originator_version = u.ver;
END
$body$;

-- Whether any of these events is still pending (VOLATILE: a fresh snapshot at each call).
CREATE OR REPLACE FUNCTION memwarden.mw_any_pending(p_ids uuid[], p_versions bigint[])
RETURNS boolean
LANGUAGE sql VOLATILE AS $body$
    SELECT EXISTS (
        SELECT 1 FROM unnest(p_ids, p_versions) AS u(id, ver)
          JOIN memwarden.events e ON e.originator_id = u.id AND e.originator_version = u.ver
         WHERE e.notification_id IS NULL);
$body$;

-- The insert of an append, both modes: the groups' events after (p_pos, p_hash), on the
-- single chain (p_tenant NULL: global positions and links) or on p_tenant's chain (tenant
-- positions and links; no global position yet), and their data keys. Optimistic
-- concurrency: a stream version already taken violates the primary key; rare, so the common
-- path does no lookups and the rare one finds the groups and tries once more without them.
-- Returns the appended events' groups (in order), the refused groups and the last link.
CREATE OR REPLACE FUNCTION memwarden.mw_insert_groups(
    p_tenant text, p_pos bigint, p_hash bytea,
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[],
    OUT appended int[], OUT bad int[], OUT last_hash bytea)
LANGUAGE plpgsql AS $body$
DECLARE
    hashes bytea[];
    attempt int;
BEGIN
    bad := '{}';
    FOR attempt IN 1 .. 2 LOOP
        SELECT coalesce(array_agg(u.g ORDER BY u.ord), '{}'),
               memwarden.mw_links(p_pos, p_hash, array_agg(u.id ORDER BY u.ord), array_agg(u.ver ORDER BY u.ord),
                                  array_agg(u.topic ORDER BY u.ord), array_agg(u.state ORDER BY u.ord))
          INTO appended, hashes
          FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
               WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
         WHERE NOT (u.g = ANY(bad));
        hashes := coalesce(hashes, '{}');
        BEGIN
            INSERT INTO memwarden.events
                (notification_id, tenant, tenant_position, originator_id, originator_version, topic, state)
            SELECT CASE WHEN p_tenant IS NULL THEN p_pos + row_number() OVER (ORDER BY u.ord) END,
                   p_tenant,
                   CASE WHEN p_tenant IS NOT NULL THEN p_pos + row_number() OVER (ORDER BY u.ord) END,
                   u.id, u.ver, u.topic, u.state
              FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
                   WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
             WHERE NOT (u.g = ANY(bad));
            IF p_tenant IS NULL THEN
                INSERT INTO memwarden.ledger_chain (position, hash)
                SELECT p_pos + x.o, x.hh FROM unnest(hashes) WITH ORDINALITY AS x(hh, o);
            ELSE
                INSERT INTO memwarden.tenant_chain (tenant, position, hash)
                SELECT p_tenant, p_pos + x.o, x.hh FROM unnest(hashes) WITH ORDINALITY AS x(hh, o);
            END IF;
            PERFORM memwarden.mw_store_keys(bad, p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                            p_destroy_ids, p_destroy_groups);
            EXIT;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 2 THEN
                RAISE;
            END IF;
            bad := memwarden.mw_taken_groups(p_ids, p_versions, p_groups);
        END;
    END LOOP;
    last_hash := CASE WHEN cardinality(hashes) > 0 THEN hashes[cardinality(hashes)] ELSE p_hash END;
END
$body$;

-- Tenant mode: append groups of one tenant. Returns each appended event's group and tenant
-- position (in the arrays' order), and each refused group with a NULL position.
CREATE OR REPLACE FUNCTION memwarden.mw_append_tenant(
    p_tenant text,
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
    -- Only this tenant's appends wait here: the head row, made on the tenant's first append.
    INSERT INTO memwarden.tenant_heads (tenant, position, hash)
    VALUES (p_tenant, 0, sha256(convert_to('memwarden chain' || p_tenant, 'UTF8')))
    ON CONFLICT (tenant) DO NOTHING;
    SELECT h.position, h.hash INTO head_pos, head_hash
      FROM memwarden.tenant_heads h WHERE h.tenant = p_tenant FOR UPDATE;
    SELECT * INTO r FROM memwarden.mw_insert_groups(p_tenant, head_pos, head_hash, p_ids, p_versions, p_topics, p_states,
                                                   p_groups, p_key_ids, p_key_groups, p_key_keks, p_key_wrapped,
                                                   p_destroy_ids, p_destroy_groups);
    IF cardinality(r.appended) > 0 THEN
        UPDATE memwarden.tenant_heads SET position = head_pos + cardinality(r.appended), hash = r.last_hash
         WHERE tenant = p_tenant;
    END IF;
    RETURN QUERY SELECT * FROM memwarden.mw_positions(head_pos, r.appended, r.bad);
END
$body$;

-- What an append function returns: each appended event's group and position (after p_pos,
-- in order), then each refused group with a NULL position.
CREATE OR REPLACE FUNCTION memwarden.mw_positions(p_pos bigint, p_appended int[], p_bad int[])
RETURNS TABLE(grp int, pos bigint)
LANGUAGE sql IMMUTABLE AS $body$
    SELECT a.g, p_pos + a.o FROM unnest(p_appended) WITH ORDINALITY AS a(g, o)
    UNION ALL
    SELECT b.g, NULL::bigint FROM unnest(p_bad) AS b(g);
$body$;

-- Tenant mode in one round trip: the append (committed here), then its events' global
-- positions (mw_sequence_for, a second transaction). Returns, for each event of the arrays in
-- their order, its global position, NULL for the events of a refused group.
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
    SELECT array_agg(s.notification_id ORDER BY u.ord) INTO r_positions
      FROM unnest(p_ids, p_versions, p_groups) WITH ORDINALITY AS u(id, ver, g, ord)
      LEFT JOIN memwarden.mw_sequence_for(
                    ARRAY(SELECT v.id FROM unnest(p_ids, p_groups) AS v(id, g) WHERE NOT (v.g = ANY(refused))),
                    ARRAY(SELECT v.ver FROM unnest(p_versions, p_groups) AS v(ver, g) WHERE NOT (v.g = ANY(refused)))
                ) AS s ON s.originator_id = u.id AND s.originator_version = u.ver AND NOT (u.g = ANY(refused));
END
$body$;


-- Global mode: as in 0001, but under the sequence lock instead of the events table's
-- EXCLUSIVE lock (which would also make every tenant-mode append wait), and after
-- sequencing the rows pending from tenant-mode appends: a committed event always comes
-- before any event appended after it, whichever mode appended either.
CREATE OR REPLACE FUNCTION memwarden.mw_append(
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
    PERFORM pg_notify('events', '');
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
