-- Least privilege for producers in other languages (issue 37): the SQL API's lease and enqueue
-- functions run with their owner's rights (SECURITY DEFINER, with a pinned search_path), so a
-- worker needs no right on any outbox table, only EXECUTE on them. EXECUTE on the schema's
-- functions is no longer everyone's (PUBLIC); the role outbox_producer holds it, and is what a
-- deployment grants its workers' logins.
--
-- Roles belong to the cluster, not the database: outbox_producer is created when missing and
-- when the migrating role may create roles (CREATEROLE or superuser), and shared by every
-- database of the cluster with an outbox (a member may call the functions in each database it
-- can connect to). Without that right the migration only says so (NOTICE); a role administrator
-- then runs `CREATE ROLE outbox_producer NOLOGIN;` and `SELECT outbox.grant_producer_role();`.

-- 1. The four functions a producer calls run with the owner's rights. search_path is pinned to
-- the catalog and the schema holding the outbox tables (this migration's current schema), so
-- a caller's objects can never stand in for the ones they use.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'outbox.try_acquire(text, interval)',
        'outbox.renew(text, uuid, bigint, interval)',
        'outbox.release(text, uuid, bigint)',
        'outbox.enqueue(text, uuid, bigint, text, text, text, jsonb, bytea, text, text, text, '
            'boolean, interval, boolean, boolean, text)']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp',
                       f, current_schema());
    END LOOP;
END
$$;

-- 2. Whoever could call them before keeps calling them: the roles granted USAGE on the schema
-- (the README's grants until now) get EXECUTE on the four, since PUBLIC is about to lose it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole::text AS name
        FROM pg_namespace n, aclexplode(n.nspacl) a
        WHERE n.nspname = 'outbox' AND a.privilege_type = 'USAGE'
          AND a.grantee <> n.nspowner AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION outbox.try_acquire(text, interval), '
                       'outbox.renew(text, uuid, bigint, interval), '
                       'outbox.release(text, uuid, bigint), '
                       'outbox.enqueue(text, uuid, bigint, text, text, text, jsonb, bytea, text, '
                       'text, text, boolean, interval, boolean, boolean, text) TO %s', r.name);
    END LOOP;
END
$$;

-- 3. No function or procedure of the schema is everyone's any more: its helpers were never
-- meant to be called, and the routines later migrations add are not either.
REVOKE EXECUTE ON ALL ROUTINES IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON ROUTINES FROM PUBLIC;

-- 4. The producer role: USAGE on the schema and EXECUTE on the four functions, nothing else.
-- Run again by a role administrator after creating the role, when the migrating role could not.
CREATE FUNCTION outbox.grant_producer_role() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_producer') THEN
        IF NOT (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            RAISE NOTICE 'the role outbox_producer does not exist and % may not create roles: '
                         'a role administrator runs CREATE ROLE outbox_producer NOLOGIN, then '
                         'SELECT outbox.grant_producer_role() (README, "Security")', current_user;
            RETURN false;
        END IF;
        BEGIN
            CREATE ROLE outbox_producer NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- another database of the cluster created it meanwhile
        END;
    END IF;
    GRANT USAGE ON SCHEMA outbox TO outbox_producer;
    GRANT EXECUTE ON FUNCTION outbox.try_acquire(text, interval),
                              outbox.renew(text, uuid, bigint, interval),
                              outbox.release(text, uuid, bigint),
                              outbox.enqueue(text, uuid, bigint, text, text, text, jsonb, bytea,
                                             text, text, text, boolean, interval, boolean,
                                             boolean, text)
        TO outbox_producer;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.grant_producer_role() FROM PUBLIC;

SELECT outbox.grant_producer_role();
