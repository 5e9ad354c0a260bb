-- Which model (and prompt) filled each embedding column, so that a query vector for a column
-- comes from the same model (tributary_embed_for) and a second model cannot silently write
-- vectors of another space into it (22023 with a HINT).
--
-- Written only through tributary._bind_column (SECURITY DEFINER, not executable by PUBLIC):
-- tributary_embed_column calls it as the extension's owner after checking that the caller may
-- UPDATE the column, and tributary._job_create for a job's target. Readable by everyone, as
-- tributary.models is.

CREATE TABLE tributary.column_models (
    relid       regclass NOT NULL,          -- the table (dumped and restored by name)
    attname     name NOT NULL,              -- the vector/halfvec column
    model       text NOT NULL,              -- tributary.models.name
    prompt      text,                       -- the prompt's name the texts were embedded with, or NULL
    filled_by   text NOT NULL,              -- 'tributary_embed_column' or 'job <id>'
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relid, attname)
);
-- Readable by everyone; written only by tributary's own functions (no role holds DML on it, so
-- none can lock it against the sql_drop event trigger or the functions that read it).
REVOKE ALL ON tributary.column_models FROM PUBLIC;
GRANT SELECT ON tributary.column_models TO PUBLIC;
ALTER TABLE tributary.column_models ENABLE ROW LEVEL SECURITY;
CREATE POLICY read ON tributary.column_models FOR SELECT USING (true);
SELECT pg_catalog.pg_extension_config_dump('tributary.column_models', '');

-- Records that `model` (with `prompt`) fills column `col` of `rel`, or checks that it is the
-- model already recorded: 22023 when another model or prompt filled it. Returns whether a new
-- record was made. Temporary tables are not recorded: they end with their session without an
-- event trigger seeing it, and a record left behind would bind a later table given the same OID.
CREATE FUNCTION tributary._bind_column(rel regclass, col name, model text, prompt text, filled_by text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b tributary.column_models;
BEGIN
    IF (SELECT relpersistence FROM pg_class WHERE oid = rel) = 't' THEN
        RETURN false;
    END IF;
    SELECT * INTO b FROM tributary.column_models c WHERE c.relid = rel AND c.attname = col;
    IF NOT FOUND THEN
        INSERT INTO tributary.column_models (relid, attname, model, prompt, filled_by)
        VALUES (rel, col, model, prompt, filled_by);
        RETURN true;
    END IF;
    IF b.model IS DISTINCT FROM model OR b.prompt IS DISTINCT FROM prompt THEN
        RAISE EXCEPTION 'column %.% holds embeddings of model "%"%, not of "%"%',
                rel, quote_ident(col), b.model,
                CASE WHEN b.prompt IS NULL THEN '' ELSE format(' (prompt "%s")', b.prompt) END,
                model,
                CASE WHEN prompt IS NULL THEN '' ELSE format(' (prompt "%s")', prompt) END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Filled by %s (tributary.column_models); vectors of different models or prompts in one column cannot be compared.',
                                  b.filled_by),
                  HINT = format('Use model => %L%s, or empty the column and call tributary_forget_column(%L, %L) first.',
                                b.model,
                                CASE WHEN b.prompt IS NULL THEN '' ELSE format(', prompt => %L', b.prompt) END,
                                rel::text, col);
    END IF;
    RETURN false;
END $$;
REVOKE ALL ON FUNCTION tributary._bind_column(regclass, name, text, text, text) FROM PUBLIC;

-- tributary_forget_column(tbl, col) -> boolean: forgets which model filled the column (after
-- emptying it, to fill it with another model). Table owners (and members of the owner's role)
-- only (42501); false when nothing was recorded; NULL in, NULL out. Through tributary._job_call,
-- which passes the calling role to tributary._forget_column (SECURITY DEFINER: no role holds
-- DELETE on tributary.column_models).
CREATE FUNCTION tributary._forget_column(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tbl regclass := (a->>'tbl')::oid;
    col name := a->>'col';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM tributary.column_models c WHERE c.relid = tbl AND c.attname = col;
    RETURN CASE WHEN FOUND THEN 1 ELSE 0 END;
END $$;
REVOKE ALL ON FUNCTION tributary._forget_column(oid, jsonb) FROM PUBLIC;

CREATE FUNCTION tributary_forget_column(tbl regclass, col name) RETURNS boolean
LANGUAGE sql STRICT VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT tributary._job_call('forget_column', jsonb_build_object('tbl', tbl::oid, 'col', col)) = 1
$$;

-- tributary_embed_for(tbl, col, text [, prompt]) -> vector: the query embedding of `text` for
-- column `col` of `tbl`, by the model recorded for that column. `prompt` defaults to the model's
-- prompt named 'query' when it has one (search queries against embedded documents), else to its
-- default prompt. A NULL table, column or text gives NULL. Errors: 42704 no model recorded for the column; those of
-- tributary_embed.
CREATE FUNCTION tributary_embed_for(tbl regclass, col name, text text, prompt text DEFAULT NULL)
RETURNS vector
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m text;
    p text := prompt;
BEGIN
    IF tbl IS NULL OR col IS NULL OR text IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT c.model INTO m FROM tributary.column_models c WHERE c.relid = tbl AND c.attname = col;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no model is recorded for column %.%', tbl, quote_ident(col)
            USING ERRCODE = 'undefined_object',
                  HINT = 'Fill the column with tributary_embed_column() or a job, which record the model; or name the model: tributary_embed(text, model => ...).';
    END IF;
    IF p IS NULL THEN
        SELECT CASE WHEN mm.prompts ? 'query' THEN 'query' END INTO p FROM tributary.models mm WHERE mm.name = m;
    END IF;
    -- (tributary_embed's C function under a name in schema tributary, where no other role can
    -- add an overload that makes the call ambiguous: sql/match.sql)
    RETURN tributary._embed_text(text, m, p);
END $$;

-- Records of dropped tables go with them (a dangling regclass could not be dumped and restored).
CREATE FUNCTION tributary._column_models_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM tributary.column_models c
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class r WHERE r.oid = c.relid)
        OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = c.relid AND a.attname = c.attname AND NOT a.attisdropped);
END $$;
CREATE EVENT TRIGGER tributary_column_models_drop ON sql_drop
    EXECUTE FUNCTION tributary._column_models_drop();

-- Records follow a column renamed by ALTER TABLE ... RENAME COLUMN (of the table, or of a
-- partitioned table above it): the one record of the table whose column no longer exists takes
-- the new name, unless the new name has a record already.
CREATE FUNCTION tributary._column_models_rename() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT t.relid, a.attname
               FROM pg_event_trigger_ddl_commands() d
               JOIN pg_attribute a ON a.attrelid = d.objid AND a.attnum = d.objsubid AND NOT a.attisdropped
               CROSS JOIN LATERAL (SELECT d.objid::regclass AS relid UNION SELECT p.relid FROM pg_partition_tree(d.objid) p) t
              WHERE d.classid = 'pg_class'::regclass AND d.objsubid > 0 LOOP
        UPDATE tributary.column_models c SET attname = r.attname
         WHERE c.relid = r.relid
           AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.relid AND a.attname = c.attname AND NOT a.attisdropped)
           AND NOT EXISTS (SELECT 1 FROM tributary.column_models x WHERE x.relid = r.relid AND x.attname = r.attname)
           AND (SELECT count(*) FROM tributary.column_models x WHERE x.relid = r.relid
                  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.relid AND a.attname = x.attname AND NOT a.attisdropped)) = 1;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION tributary._column_models_rename() FROM PUBLIC;
CREATE EVENT TRIGGER tributary_column_models_rename ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION tributary._column_models_rename();
