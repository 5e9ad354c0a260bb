-- Predictors that learn: tributary_train (src/api/learn.rs) trains a model of a table's column
-- over features tributary builds itself (k-NN votes from an embedding, a TF-IDF lexical model,
-- the as-of label history of rows related through foreign keys, typed columns; crates/learn)
-- and stores it here; tributary_predict_column / tributary_predict apply it.
--
-- The catalog tributary._predictors holds the serialised model, which encodes the labels it was
-- trained on: nobody but the extension's own functions reads it. Written only by the Rust
-- functions, as the extension's owner, after they checked the caller: a name belongs to the role
-- that trained it first; only that role (or a member) retrains or drops it (42501).
--
-- Who may use or see a predictor (tributary._predictor_hidden): its owner and the roles that
-- inherit the owner's privileges, and any other role that may see every row and column the
-- predictor was trained on: for each table it reads (read_tables: its own table, the parents and
-- link tables of its history paths and columns) the role has USAGE on the schema, SELECT on every
-- column it reads (read_columns), and no row-level security applies to it there. Otherwise the
-- model would tell it labels, counts and classes of rows a policy hides (42501; the view shows it
-- nothing). Values of a user's table become text only through tributary._text (never a cast a
-- role made: src/pg/values.rs).

CREATE TABLE tributary._predictors (
    name          text PRIMARY KEY,
    owner         regrole NOT NULL,           -- the role that trained it (dumped by name)
    tbl           regclass NOT NULL,          -- the table (dumped and restored by name)
    label         name NOT NULL,              -- the column predicted
    kind          text NOT NULL CHECK (kind IN ('category', 'number')),
    embedding     name,                       -- the vector/halfvec column of the k-NN votes, or NULL
    as_of         name,                       -- the time column, or NULL (leave-one-out)
    options       jsonb NOT NULL,             -- history, columns, algorithm, k as asked; named: the paths and columns named
    signature     jsonb NOT NULL,             -- every column read, with its type: [[table, column, type], ...]
    features      text[] NOT NULL,            -- the feature names, in the model's order
    algorithm     text NOT NULL,              -- 'gbdt' or 'logistic'
    classes       text[],                     -- categories: the classes known at training
    model         bytea NOT NULL,             -- crates/learn's Model::to_bytes
    metrics       jsonb NOT NULL,             -- what tributary_train returned
    training_rows bigint NOT NULL,
    trained_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    data_digest   text NOT NULL,              -- FNV-1a over the training rows' keys, times and labels
    read_tables   regclass[],                 -- every table it reads, its own first (NULL: trained before 0.11.0)
    read_columns  jsonb,                      -- [[column, ...], ...]: the columns it reads of each of read_tables
    outputs       name[] NOT NULL DEFAULT '{}' -- the columns tributary_predict_column wrote its predictions to (no features of later training)
);
REVOKE ALL ON tributary._predictors FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('tributary._predictors', '');

-- `s` cut to 64 characters (names echoed in messages: a 1 MB name makes no 1 MB error).
CREATE FUNCTION tributary._learn_short(s text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN length(s) <= 64 THEN s ELSE left(s, 64) || '...' END
$$;

-- The first ten of `items`, quoted and cut (tributary._learn_short), and how many more.
CREATE FUNCTION tributary._learn_list(items text[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT string_agg(quote_literal(tributary._learn_short(i)), ', ' ORDER BY o)
           || CASE WHEN cardinality(items) > 10 THEN format(' and %s more', cardinality(items) - 10) ELSE '' END
      FROM unnest(items) WITH ORDINALITY u(i, o) WHERE o <= 10
$$;

-- The type category of type `typ` seen through domains, and its name when that base type is
-- built in (OID below 16384; NULL for an enum, a composite, a range or any type a role made, so
-- that only PostgreSQL's own casts and operators turn a value into a number).
CREATE FUNCTION tributary._learn_type(typ oid, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE d(oid, depth) AS (
        SELECT typ, 0
        UNION ALL
        SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_type t ON t.oid = d.oid
         WHERE t.typtype = 'd' AND d.depth < 64)
    SELECT t.typcategory, CASE WHEN t.oid < 16384 THEN t.typname END
      FROM d JOIN pg_type t ON t.oid = d.oid ORDER BY d.depth DESC LIMIT 1
$$;

-- The type of column `col` of `rel` as format_type() writes it, and its type category and
-- built-in type name through domains (tributary._learn_type), or NULLs.
CREATE FUNCTION tributary._learn_column_type(rel regclass, col name, OUT sql_type text, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(a.atttypid, a.atttypmod), b.category, b.typname
      FROM pg_attribute a CROSS JOIN LATERAL tributary._learn_type(a.atttypid) b
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- A float8 expression of value `v` (an expression of type category `category`, built-in type
-- `typname`): numbers as they are, booleans 0/1, dates as days since 1970-01-01, timestamps as
-- days (with fractions) since the epoch, an infinite date or timestamp NULL (missing); NULL for
-- other types.
CREATE FUNCTION tributary._learn_number(v text, category "char", typname name) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN category = 'N' AND typname NOT IN ('oid', 'regclass', 'regproc', 'regtype', 'money')
            THEN format('CAST(%s AS pg_catalog.float8)', v)
        WHEN category = 'B' AND typname = 'bool' THEN format('CAST(CAST(%s AS pg_catalog.int4) AS pg_catalog.float8)', v)
        WHEN typname = 'date' THEN format('CASE WHEN pg_catalog.isfinite(%1$s) THEN CAST(%1$s OPERATOR(pg_catalog.-) CAST(''1970-01-01'' AS pg_catalog.date) AS pg_catalog.float8) END', v)
        WHEN typname IN ('timestamp', 'timestamptz')
            THEN format('CASE WHEN pg_catalog.isfinite(%1$s) THEN (pg_catalog.date_part(''epoch'', %1$s) OPERATOR(pg_catalog./) CAST(86400 AS pg_catalog.float8)) END', v)
    END
$$;

-- A text expression of the key columns `cols` of alias `alias` (one column: its text; several:
-- the row constructor's text), NULL when any of them is NULL; through tributary._text.
CREATE FUNCTION tributary._learn_key_text(alias text, cols name[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN cardinality(cols) = 1 THEN format('tributary._text(%I.%I)', alias, cols[1])
           ELSE format('CASE WHEN pg_catalog.num_nulls(%s) = 0 THEN tributary._text(ROW(%s)) END',
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)),
                       (SELECT string_agg(format('%I.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)))
           END
$$;
-- The foreign keys of `rel` (as the referencing table), one row each: the constraint, the
-- referencing columns, the referenced table and columns, in key order. A foreign key to a
-- partitioned table is one row: not the copies PostgreSQL keeps for each referenced partition
-- (pg_constraint rows of the same table whose conparentid is that foreign key).
CREATE FUNCTION tributary._learn_fkeys(rel regclass)
RETURNS TABLE (conname name, cols name[], ref regclass, ref_cols name[])
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.conname,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n),
           c.confrelid::regclass,
           (SELECT array_agg(a.attname ORDER BY k.o) FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
              JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n)
      FROM pg_constraint c
     WHERE c.conrelid = rel AND c.contype = 'f'
       AND NOT EXISTS (SELECT 1 FROM pg_constraint p WHERE p.oid = c.conparentid AND p.conrelid = c.conrelid)
     ORDER BY c.conname
$$;

-- Whether `name` is chosen by `choice` (NULL: everything; '{}': nothing; else names to use,
-- or, prefixed with '-', names to leave out: a list of only exclusions keeps everything else).
CREATE FUNCTION tributary._learn_chosen(name text, choice text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN choice IS NULL THEN true
        WHEN cardinality(choice) = 0 THEN false
        WHEN ('-' || name) = ANY (choice) THEN false
        WHEN name = ANY (choice) THEN true
        ELSE NOT EXISTS (SELECT 1 FROM unnest(choice) c WHERE c NOT LIKE '-%')
    END
$$;

-- Whether the caller may read every one of `cols` of `rel` (a path or join is used only then:
-- training reads what it finds with the caller's rights, and an unreadable column is a 42501).
CREATE FUNCTION tributary._learn_readable(rel regclass, cols name[])
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(cols) c
                        WHERE NOT pg_catalog.has_column_privilege(rel, c, 'SELECT'))
$$;

-- Whether a predictor over `tbl` may read table `other` without its path or column being named
-- (the owner rule of child context, README "Security"): `other` is owned by tbl's owner or by a
-- role the current role is a member of, superuser status not counting (is_member_of_role_nosuper).
-- Reading a table runs its owner's row-level security policies as the reader, and a role needs
-- only REFERENCES on a table to make a link table of it.
CREATE FUNCTION tributary._learn_trusted(tbl regclass, other regclass) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE m(r) AS (
        SELECT r.oid FROM pg_roles r WHERE r.rolname = CURRENT_USER
        UNION
        SELECT a.roleid FROM pg_auth_members a JOIN m ON a.member = m.r)
    SELECT coalesce((SELECT o.relowner = t.relowner OR o.relowner IN (SELECT m.r FROM m)
                       FROM pg_class o, pg_class t WHERE o.oid = other AND t.oid = tbl), false)
$$;

-- `reads` ([[table oid, column], ...]) with columns `cols` of `rel` added.
CREATE FUNCTION tributary._learn_reads(reads jsonb, rel regclass, cols name[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT reads || coalesce((SELECT jsonb_agg(jsonb_build_array(CAST(CAST(rel AS oid) AS int8), c)) FROM unnest(cols) c), '[]')
$$;

-- Whether row-level security applies to role `who` on table `rel`, as PostgreSQL decides it
-- (check_enable_rls): the table has row security enabled, and the role is neither a superuser
-- nor BYPASSRLS (not inherited), nor the table's owner or a role inheriting the owner's
-- privileges unless the table FORCEs row security. A policy that shows every row still applies.
CREATE FUNCTION tributary._learn_rls(who oid, rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.relrowsecurity
           AND NOT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_roles r WHERE r.oid = who), false)
           AND (c.relforcerowsecurity OR NOT pg_has_role(who, c.relowner, 'USAGE'))
      FROM pg_class c WHERE c.oid = rel
$$;

-- Why role `who` may not use a predictor that reads `tables` (columns `cols`, [[column, ...],
-- ...] in the same order) as a role other than its owner, or NULL when it may: the first table
-- (in order) that is gone, whose schema it may not use, where row-level security applies to it
-- (tributary._learn_rls), or with a column it reads that is gone or that `who` may not SELECT.
-- NULL `tables` (a predictor trained before 0.11.0, whose tables are not recorded): never.
-- The rule of the view tributary.predictors, tributary_predict, tributary_predict_column and
-- predict jobs (src/service/learn/catalog.rs).
CREATE FUNCTION tributary._predictor_hidden(who oid, tables regclass[], cols jsonb) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN tables IS NULL THEN 'It was trained before tributary 0.11.0, which did not record the tables it reads.'
      ELSE (SELECT r.why FROM (
        SELECT u.i, CASE
            WHEN c.oid IS NULL THEN format('A table it reads (OID %s) does not exist any more.', CAST(u.t AS oid))
            WHEN NOT has_schema_privilege(who, c.relnamespace, 'USAGE')
                THEN format('Role %s may not use the schema of table %s.', quote_ident(pg_get_userbyid(who)), u.t)
            WHEN tributary._learn_rls(who, c.oid)
                THEN format('Row-level security applies to role %s on table %s: the predictor learnt from rows it may not see.', quote_ident(pg_get_userbyid(who)), u.t)
            ELSE (SELECT format('Role %s may not read column %s of table %s.', quote_ident(pg_get_userbyid(who)), quote_ident(tributary._learn_short(x.col)), u.t)
                    FROM jsonb_array_elements_text(coalesce(cols -> CAST(u.i - 1 AS int4), '[]')) x(col)
                    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = x.col AND a.attnum > 0 AND NOT a.attisdropped
                   WHERE CASE WHEN a.attnum IS NULL THEN true ELSE NOT has_column_privilege(who, c.oid, a.attnum, 'SELECT') END
                   LIMIT 1)
          END AS why
          FROM unnest(tables) WITH ORDINALITY u(t, i) LEFT JOIN pg_class c ON c.oid = CAST(u.t AS oid)) r
       WHERE r.why IS NOT NULL ORDER BY r.i LIMIT 1)
    END
$$;

CREATE VIEW tributary.predictors WITH (security_barrier) AS
SELECT p.name, p.owner, p.tbl, p.label, p.kind, p.embedding, p.as_of, p.options, p.features,
       p.algorithm, p.classes, p.metrics, p.training_rows, p.trained_at, p.data_digest,
       pg_catalog.octet_length(p.model) AS model_bytes
  FROM tributary._predictors p
 WHERE pg_catalog.pg_has_role(CURRENT_USER, p.owner::oid, 'USAGE')
    OR tributary._predictor_hidden((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER),
                                   p.read_tables, p.read_columns) IS NULL;
GRANT SELECT ON tributary.predictors TO PUBLIC;

-- `alias`.col, ... of `cols` (alias may be a placeholder such as %ROW%).
CREATE FUNCTION tributary._learn_cols(alias text, cols name[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT string_agg(format('%s.%I', alias, c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY u(c, o)
$$;

-- A condition "the columns `lhs` (an expression list of `n` columns) are among the rows of
-- `subquery`", in the form an index answers: one column as = ANY (ARRAY(subquery)) (an index
-- scan of the array's values, where IN (subquery) may become a hash join over a scan), several
-- as a row IN (subquery).
CREATE FUNCTION tributary._learn_in(lhs text, n integer, subquery text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN n = 1 THEN format('%s = ANY (ARRAY(%s))', lhs, subquery)
                ELSE format('(%s) IN (%s)', lhs, subquery) END
$$;

-- The plan of a predictor over column `label` of `tbl`: what tributary_train and the
-- prediction functions read, as jsonb (src/service/learn.rs reads it):
--   kind            'category' or 'number' (tributary.label_kind)
--   rows_sql        one row per row of the table: key (jsonb text), tableoid, ctid, as_of
--                   (float8), label (text or float8), text, embedding (float4[]), numbers
--                   (float8[]), categories (text[]), the group of each parent path (text[]), the
--                   referenced key of each link path (text[]); %SOURCE%, %TABLEOID% and %CTID%
--                   are replaced by the caller (the table; or one record)
--   numbers, categories  the names of the typed features in rows_sql's arrays
--   parents         the names of the parent, two- and three-hop paths, in the order of rows_sql's
--                   groups
--   links           [{name, ref, sql, related_sql}]: sql gives (referenced key text, group text)
--                   pairs of one link path, ref = the index into rows_sql's referenced keys;
--                   related_sql those of the groups the record %ROW% is linked to
--   missing_indexes CREATE INDEX statements of the indexes related_sql wants that are missing
--   affected_sql    the keys of the unlabelled rows whose prediction a change of the row %ROW%
--                   may change (itself; the rows sharing a group with it, strictly later), for
--                   a predict job's refresh of the changed rows only; primary_key its column
--   related_sql     the rows one record (%ROW%) is predicted from, for %SOURCE%: its own row in
--                   the table and, strictly earlier, the rows sharing a group with it through
--                   each path and its %K5% nearest labelled rows, each found through an index
--                   (of the key, a foreign key, a link table's columns, the embedding); NULL
--                   without a one-column primary key
--   related_rows_sql rows_sql for related_sql's rows: the text, embedding, numbers and
--                   categories only for the record's own row and its nearest rows (NULL for the
--                   others: only their key, time, label and groups make features); NULL
--                   without a one-column primary key
--   as_of_sql       a statement that turns $1 (text) into the as_of float8, for split_at
--   signature       [[table, column, type], ...] of every column read
--   paths, columns  every history path and feature column found (chosen or not)
--   paths_used, columns_used  those chosen (what tributary_train stores as the predictor's
--                   history and columns, so that columns added later change nothing)
--   reads           [[table OID, [column, ...]], ...]: every column the chosen features read, tbl first
--   untrusted       the tables of other roles left out (tributary._learn_trusted), for a NOTICE
--   vouched         the chosen paths and columns that read a table tbl's owner does not own (read
--                   because the caller is a member of its owner, or named): tributary_train
--                   stores them as named, so that the predictor reads them for whoever may use it
-- Paths (README, "Models that learn"): a foreign key of tbl, named by its columns
-- ("album_id": rows with the same parent); through the parent's own foreign keys ("album_id.artist_id":
-- rows whose parents share a grandparent); through the grandparent's ("track_id.album_id.artist_id":
-- rows whose grandparents share a great-grandparent); a link table referencing tbl and another
-- table ("film_person.person_id": rows linked to the same person); a link table referencing a
-- parent and another table ("track_id.playlist_track.playlist_id": rows whose parents share a
-- playlist). Typed columns: tbl's own numbers,
-- booleans, dates and timestamps, and text columns of at most 64 distinct values (categories;
-- counted over the whole table, so the same rows give the same features in any heap order); a
-- column without any value is none (an empty target column); the numbers of each parent
-- ("album_id.price"). With `time_parts` and an as_of of a date or timestamp type, its month
-- ("{as_of}:month", 1-12) and ISO weekday ("{as_of}:weekday", 1 = Monday), and for timestamps
-- its hour ("{as_of}:hour"), all in UTC for timestamptz (the same in every session's TimeZone),
-- are numbers too (predictors trained since 0.12.0). A column in `outputs` (a predict job's
-- target, a column tributary_predict_column wrote) is no feature unless `columns` names it. Rows are read in the order of their key's
-- text (byte order), so that a table in another heap order gives the same dataset (a table
-- without a primary key is read in ctid order). Text: tbl's own text
-- columns, its parents' ("track_id.name") and its grandparents' ("track_id.album_id.title"),
-- chosen by `columns` too. Only columns the caller may read are found; named ones it may not read fail when read
-- (42501). A path or column that reads a table other than tbl is found only when that table is
-- trusted (tributary._learn_trusted: tbl's owner's, or of a role the caller is a member of) or
-- the path or column is in `named` (NULL: the names in history and columns, as tributary_train
-- gives them; a stored predictor passes the names its trainer gave). Errors: 42809 tbl not a
-- table; 42703 unknown label, as_of or embedding column; 42804 as_of not a number, date or
-- timestamp, a number label of a type that is not built in, embedding not vector/halfvec;
-- 22023 a history path or column named that does not exist (DETAIL lists those found).
CREATE FUNCTION tributary._learn_spec(
    tbl regclass, label name, embedding name, as_of name, history text[], columns text[],
    named text[] DEFAULT NULL, time_parts boolean DEFAULT false, outputs text[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vec text;
    kind text;
    rk "char" := (SELECT c.relkind FROM pg_class c WHERE c.oid = tbl);
    ty record;
    a record;
    fk record;
    fk2 record;
    fk3 record;
    lk record;
    key_expr text;
    as_of_expr text := 'CAST(NULL AS pg_catalog.float8)';
    as_of_sql text;
    texts text[] := '{}';
    nums text[] := '{}';
    num_names text[] := '{}';
    cats text[] := '{}';
    cat_names text[] := '{}';
    groups text[] := '{}';
    group_names text[] := '{}';
    refs text[] := '{}';
    ref_cols_seen text[] := '{}';
    links jsonb := '[]';
    found_paths text[] := '{}';
    found_cols text[] := '{}';
    used_cols text[] := '{}';
    used_paths text[] := '{}';
    sig jsonb := '[]';
    reads jsonb := '[]';
    untrusted text[] := '{}';
    vouched text[] := '{}';
    own oid := (SELECT c.relowner FROM pg_class c WHERE c.oid = tbl);
    names text[] := coalesce(named, ARRAY(SELECT h FROM unnest(coalesce(history, '{}') || coalesce(columns, '{}')) h WHERE h NOT LIKE '-%'));
    p_ok boolean;
    g_ok boolean;
    p_own boolean;
    g_own boolean;
    key_cols name[];
    pname text;
    path2 text;
    n bigint;
    num text;
    pn text[];
    pnn text[];
    ptx text[];
    emb_expr text := 'CAST(NULL AS pg_catalog.float4[])';
    knn_keys text;
    sel text[];
    ridx integer;
    related text[] := '{}';
    pk name[];
    cond text;
    wanted jsonb := '[]';
    affected text;
BEGIN
    -- A table (its rows are read with tableoid and ctid, and written back by them).
    IF rk IS NOT NULL AND rk NOT IN ('r', 'p', 'm', 'f') THEN
        RAISE EXCEPTION '"%" is not a table', tbl USING ERRCODE = '42809',
            DETAIL = format('It is %s.', CASE rk WHEN 'S' THEN 'a sequence' WHEN 'v' THEN 'a view' WHEN 'c' THEN 'a composite type'
                                              WHEN 'i' THEN 'an index' WHEN 'I' THEN 'an index' WHEN 't' THEN 'a TOAST table'
                                              ELSE format('a relation of kind %L', rk) END),
            HINT = 'A predictor learns from a table, a partitioned table, a materialized view or a foreign table.';
    END IF;
    vec := tributary._vector_schema();
    kind := tributary.label_kind(tbl, label, 'auto');
    -- The row's key (tributary.row_key); without a primary or shards' key its ctid, which a
    -- record passed to tributary_predict has none of (%CTID%: NULL there).
    key_expr := CASE WHEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = tbl AND i.indisprimary)
                       OR cardinality(tributary._shard_key_columns(tbl)) > 0 THEN tributary.row_key(tbl, 't')
                     ELSE 'pg_catalog.jsonb_build_object(''ctid'', CAST(%CTID% AS pg_catalog.text))' END;
    -- Columns in a primary or foreign key: never typed features (an id is no quantity).
    SELECT coalesce(array_agg(DISTINCT att.attname), '{}') INTO key_cols
      FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) k(n)
      JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = k.n
     WHERE c.conrelid = tbl AND c.contype IN ('p', 'f', 'u');
    SELECT * INTO ty FROM tributary._learn_column_type(tbl, label);
    IF kind = 'number' AND ty.typname IS NULL THEN
        RAISE EXCEPTION 'label column "%" is of type %, not a built-in number type', label, ty.sql_type USING ERRCODE = '42804';
    END IF;
    sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, label, ty.sql_type));
    reads := tributary._learn_reads(reads, tbl, ARRAY[label]);
    -- The key columns (tributary.row_key: the primary key, else the shards' key).
    reads := tributary._learn_reads(reads, tbl, coalesce(
        (SELECT array_agg(pa.attname) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) k(attnum)
           JOIN pg_attribute pa ON pa.attrelid = i.indrelid AND pa.attnum = k.attnum WHERE i.indrelid = tbl AND i.indisprimary),
        (SELECT array_agg((parse_ident(c))[1]) FROM unnest(tributary._shard_key_columns(tbl)) c)));

    IF as_of IS NOT NULL THEN
        SELECT * INTO ty FROM tributary._learn_column_type(tbl, as_of);
        IF ty.sql_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', as_of, tbl USING ERRCODE = '42703';
        END IF;
        as_of_expr := tributary._learn_number(format('t.%I', as_of), ty.category, ty.typname);
        IF as_of_expr IS NULL OR ty.category = 'B' THEN
            RAISE EXCEPTION 'as_of column "%" is of type %, not a number, date or timestamp', as_of, ty.sql_type
                USING ERRCODE = '42804', HINT = 'as_of names the column that dates each row: an integer (a year), a date or a timestamp.';
        END IF;
        -- split_at read by the (built-in) base type's input, never a domain's CHECK.
        as_of_sql := format('SELECT %s FROM (SELECT CAST($1 AS pg_catalog.%I) AS %I) t', as_of_expr, ty.typname, as_of);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, as_of, ty.sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[as_of]);
        IF time_parts AND ty.typname IN ('date', 'timestamp', 'timestamptz') THEN
            -- Month, ISO weekday and (timestamps) hour of the as_of; timestamptz in UTC.
            num := CASE WHEN ty.typname = 'timestamptz'
                        THEN format('pg_catalog.timezone(CAST(''UTC'' AS pg_catalog.text), t.%I)', as_of)
                        WHEN ty.typname = 'date' THEN format('CAST(t.%I AS pg_catalog.timestamp)', as_of)
                        ELSE format('t.%I', as_of) END;
            FOR pn IN SELECT ARRAY[u, f] FROM (VALUES ('month', 'month'), ('isodow', 'weekday'), ('hour', 'hour')) v(u, f)
                       WHERE ty.typname <> 'date' OR u <> 'hour' LOOP
                nums := nums || format('ARRAY[CASE WHEN pg_catalog.isfinite(t.%I) THEN CAST(pg_catalog.date_part(%L, %s) AS pg_catalog.float8) END]',
                                       as_of, pn[1], num);
                num_names := num_names || format('%s:%s', as_of, pn[2]);
            END LOOP;
        END IF;
    END IF;

    IF embedding IS NOT NULL THEN
        PERFORM tributary.embedding_type(tbl, embedding);
        emb_expr := format('CAST(CAST(t.%I AS %s.vector) AS pg_catalog.float4[])', embedding, vec);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, embedding, (tributary._learn_column_type(tbl, embedding)).sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[embedding]);
    END IF;

    -- Own columns.
    FOR a IN SELECT att.attname, b.category AS typcategory, b.typname, t.typname AS own_type, format_type(att.atttypid, att.atttypmod) AS sql_type
               FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
              CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
              WHERE att.attrelid = tbl AND att.attnum > 0 AND NOT att.attisdropped
                AND att.attname NOT IN (label, coalesce(embedding, ''), coalesce(as_of, ''))
                AND NOT att.attname = ANY (key_cols)
                AND has_column_privilege(tbl, att.attnum, 'SELECT')
              ORDER BY att.attnum LOOP
        num := tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname);
        IF a.own_type IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector', 'json', 'jsonb')
           OR (num IS NULL AND a.typcategory NOT IN ('S', 'E')) THEN
            CONTINUE;
        END IF;
        -- An empty column (a target made for the predictions, say) is no feature.
        -- Distinct values over the whole table, 65 at most (the same count in any heap order).
        EXECUTE format('SELECT count(*) FROM (SELECT DISTINCT tributary._text(t.%I) AS v FROM %s t WHERE t.%I IS NOT NULL LIMIT 65) d',
                       a.attname, tbl, a.attname) INTO n;
        IF n = 0 THEN
            CONTINUE;
        END IF;
        found_cols := found_cols || a.attname::text;
        -- A column predictions are written to is a feature only when columns names it.
        IF NOT tributary._learn_chosen(a.attname, columns)
           OR (a.attname = ANY (coalesce(outputs, '{}')) AND NOT a.attname = ANY (coalesce(columns, '{}'))) THEN
            CONTINUE;
        END IF;
        used_cols := used_cols || a.attname::text;
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
        reads := tributary._learn_reads(reads, tbl, ARRAY[a.attname]);
        IF num IS NOT NULL THEN
            nums := nums || ('ARRAY[' || num || ']');
            num_names := num_names || a.attname::text;
        ELSE
            texts := texts || format('tributary._text(t.%I)', a.attname);
            IF n <= 64 THEN
                cats := cats || format('tributary._text(t.%I)', a.attname);
                cat_names := cat_names || a.attname::text;
            END IF;
        END IF;
    END LOOP;

    -- Parents: the group of each foreign key, each parent's numbers, and two and three hops;
    -- each only where the caller may read the columns it joins on, and (but for the one-hop
    -- group, which reads tbl alone) through trusted tables or named.
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        IF NOT tributary._learn_readable(tbl, fk.cols) THEN
            CONTINUE;
        END IF;
        pname := array_to_string(fk.cols, ',');
        found_paths := found_paths || pname;
        IF tributary._learn_chosen(pname, history) THEN
            groups := groups || tributary._learn_key_text('t', fk.cols);
            related := related || format('(%s) = (%s)', tributary._learn_cols('x', fk.cols), tributary._learn_cols('%ROW%', fk.cols));
            wanted := wanted || jsonb_build_array(jsonb_build_array(tbl::oid, to_jsonb(CASE WHEN as_of IS NULL THEN fk.cols ELSE fk.cols || as_of END)));
            group_names := group_names || pname;
            used_paths := used_paths || pname;
            reads := tributary._learn_reads(reads, tbl, fk.cols);
        END IF;
        IF NOT tributary._learn_readable(fk.ref, fk.ref_cols) THEN
            CONTINUE;
        END IF;
        p_ok := tributary._learn_trusted(tbl, fk.ref);
        p_own := (SELECT c.relowner FROM pg_class c WHERE c.oid = fk.ref) = own;
        -- The parent's numbers, as one float8[] subquery per parent.
        pn := '{}';
        pnn := '{}';
        ptx := '{}';
        FOR a IN SELECT att.attname, b.category AS typcategory, b.typname, t.typname AS own_type, format_type(att.atttypid, att.atttypmod) AS sql_type
                   FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                  CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
                  WHERE att.attrelid = fk.ref AND att.attnum > 0 AND NOT att.attisdropped
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk.ref
                                       AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                    AND has_column_privilege(fk.ref, att.attnum, 'SELECT')
                  ORDER BY att.attnum LOOP
            num := tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname);
            IF NOT (a.typcategory IN ('S', 'E') OR (num IS NOT NULL AND a.own_type NOT IN ('vector', 'halfvec'))) THEN
                CONTINUE;
            END IF;
            IF NOT (p_ok OR (pname || '.' || a.attname) = ANY (names)) THEN
                untrusted := untrusted || fk.ref::text;
                CONTINUE;
            END IF;
            found_cols := found_cols || (pname || '.' || a.attname);
            IF NOT tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                CONTINUE;
            END IF;
            used_cols := used_cols || (pname || '.' || a.attname);
            IF NOT p_own THEN
                vouched := vouched || (pname || '.' || a.attname);
            END IF;
            sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
            reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), fk.ref, fk.ref_cols || a.attname);
            IF a.typcategory IN ('S', 'E') THEN
                -- The parent's text (an album's title, a track's composer) joins the row's text.
                ptx := ptx || format('tributary._text(p.%I)', a.attname);
            ELSE
                pn := pn || num;
                pnn := pnn || (pname || '.' || a.attname);
            END IF;
        END LOOP;
        IF cardinality(ptx) > 0 THEN
            texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p WHERE (%s) = (%s))',
                array_to_string(ptx, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
        END IF;
        IF cardinality(pn) > 0 THEN
            -- No parent row (a NULL foreign key): as many NULLs.
            nums := nums || format('COALESCE((SELECT ARRAY[%s] FROM %s p WHERE (%s) = (%s)), pg_catalog.array_fill(CAST(NULL AS pg_catalog.float8), ARRAY[%s]))',
                array_to_string(pn, ', '), fk.ref,
                (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)),
                cardinality(pn));
            num_names := num_names || pnn;
        END IF;
        FOR fk2 IN SELECT * FROM tributary._learn_fkeys(fk.ref) LOOP
            IF NOT tributary._learn_readable(fk.ref, fk2.cols) THEN
                CONTINUE;
            END IF;
            path2 := pname || '.' || array_to_string(fk2.cols, ',');
            g_ok := tributary._learn_trusted(tbl, fk2.ref);
            g_own := (SELECT c.relowner FROM pg_class c WHERE c.oid = fk2.ref) = own;
            IF NOT (p_ok OR path2 = ANY (names)) THEN
                untrusted := untrusted || fk.ref::text;
            ELSE
                found_paths := found_paths || path2;
                IF tributary._learn_chosen(path2, history) THEN
                    groups := groups || format('(SELECT %s FROM %s p WHERE (%s) = (%s))',
                        tributary._learn_key_text('p', fk2.cols), fk.ref,
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    -- Rows whose parent has the grandparent of the record's parent.
                    related := related || tributary._learn_in(tributary._learn_cols('x', fk.cols), cardinality(fk.cols),
                        format('SELECT %s FROM %s p WHERE (%s) = (SELECT %s FROM %s q WHERE (%s) = (%s))',
                            tributary._learn_cols('p', fk.ref_cols), fk.ref, tributary._learn_cols('p', fk2.cols),
                            tributary._learn_cols('q', fk2.cols), fk.ref, tributary._learn_cols('q', fk.ref_cols),
                            tributary._learn_cols('%ROW%', fk.cols)));
                    wanted := wanted || jsonb_build_array(jsonb_build_array(tbl::oid, to_jsonb(fk.cols)),
                                                          jsonb_build_array(fk.ref::oid, to_jsonb(fk2.cols)));
                    group_names := group_names || path2;
                    used_paths := used_paths || path2;
                    IF NOT p_own THEN
                        vouched := vouched || path2;
                    END IF;
                    reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), fk.ref, fk.ref_cols || fk2.cols);
                END IF;
            END IF;
            -- Three hops: rows whose grandparents share a great-grandparent (a track's album's
            -- artist: "track_id.album_id.artist_id").
            FOR fk3 IN SELECT * FROM tributary._learn_fkeys(fk2.ref) LOOP
                -- Only a path the caller may read (the grandparent's key and foreign key columns).
                IF NOT tributary._learn_readable(fk2.ref, fk2.ref_cols || fk3.cols) THEN
                    CONTINUE;
                END IF;
                IF NOT ((p_ok AND g_ok) OR (path2 || '.' || array_to_string(fk3.cols, ',')) = ANY (names)) THEN
                    untrusted := untrusted || fk2.ref::text;
                    CONTINUE;
                END IF;
                found_paths := found_paths || (path2 || '.' || array_to_string(fk3.cols, ','));
                IF tributary._learn_chosen(path2 || '.' || array_to_string(fk3.cols, ','), history) THEN
                    groups := groups || format('(SELECT %s FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                        tributary._learn_key_text('g', fk3.cols), fk.ref, fk2.ref,
                        (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    related := related || tributary._learn_in(tributary._learn_cols('x', fk.cols), cardinality(fk.cols),
                        format('SELECT %s FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (SELECT %s FROM %s q JOIN %s h ON (%s) = (%s) WHERE (%s) = (%s))',
                            tributary._learn_cols('p', fk.ref_cols), fk.ref, fk2.ref,
                            tributary._learn_cols('g', fk2.ref_cols), tributary._learn_cols('p', fk2.cols),
                            tributary._learn_cols('g', fk3.cols),
                            tributary._learn_cols('h', fk3.cols), fk.ref, fk2.ref,
                            tributary._learn_cols('h', fk2.ref_cols), tributary._learn_cols('q', fk2.cols),
                            tributary._learn_cols('q', fk.ref_cols), tributary._learn_cols('%ROW%', fk.cols)));
                    wanted := wanted || jsonb_build_array(jsonb_build_array(tbl::oid, to_jsonb(fk.cols)),
                                                          jsonb_build_array(fk.ref::oid, to_jsonb(fk2.cols)),
                                                          jsonb_build_array(fk2.ref::oid, to_jsonb(fk3.cols)));
                    group_names := group_names || (path2 || '.' || array_to_string(fk3.cols, ','));
                    used_paths := used_paths || (path2 || '.' || array_to_string(fk3.cols, ','));
                    IF NOT (p_own AND g_own) THEN
                        vouched := vouched || (path2 || '.' || array_to_string(fk3.cols, ','));
                    END IF;
                    reads := tributary._learn_reads(tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols),
                                 fk.ref, fk.ref_cols || fk2.cols), fk2.ref, fk2.ref_cols || fk3.cols);
                END IF;
            END LOOP;
            -- The grandparent's text (a track's album title) joins the row's text too.
            ptx := '{}';
            FOR a IN SELECT att.attname, format_type(att.atttypid, att.atttypmod) AS sql_type
                       FROM pg_attribute att CROSS JOIN LATERAL tributary._learn_type(att.atttypid) b
                      WHERE att.attrelid = fk2.ref AND att.attnum > 0 AND NOT att.attisdropped
                        AND tributary._learn_readable(fk2.ref, fk2.ref_cols)
                        AND b.category IN ('S', 'E')
                        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk2.ref
                                           AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                        AND has_column_privilege(fk2.ref, att.attnum, 'SELECT')
                      ORDER BY att.attnum LOOP
                IF NOT ((p_ok AND g_ok) OR (path2 || '.' || a.attname) = ANY (names)) THEN
                    untrusted := untrusted || fk2.ref::text;
                    CONTINUE;
                END IF;
                found_cols := found_cols || (path2 || '.' || a.attname);
                IF tributary._learn_chosen(path2 || '.' || a.attname, columns) THEN
                    ptx := ptx || format('tributary._text(g.%I)', a.attname);
                    used_cols := used_cols || (path2 || '.' || a.attname);
                    IF NOT (p_own AND g_own) THEN
                        vouched := vouched || (path2 || '.' || a.attname);
                    END IF;
                    sig := sig || jsonb_build_array(jsonb_build_array(fk2.ref::text, a.attname, a.sql_type));
                    reads := tributary._learn_reads(tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols),
                                 fk.ref, fk.ref_cols || fk2.cols), fk2.ref, fk2.ref_cols || a.attname);
                END IF;
            END LOOP;
            IF cardinality(ptx) > 0 THEN
                texts := texts || format('(SELECT pg_catalog.concat_ws('' '', %s) FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                    array_to_string(ptx, ', '), fk.ref, fk2.ref,
                    (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
            END IF;
        END LOOP;
    END LOOP;

    -- A parent's link tables: rows whose parents share a row of another table through a link
    -- table (a track's playlists: "track_id.playlist_track.playlist_id").
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        FOR lk IN SELECT c.conrelid::regclass AS child, l.cols, o.cols AS other_cols
                    FROM pg_constraint c
                    CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) l
                    CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) o
                   WHERE c.confrelid = fk.ref AND c.contype = 'f' AND c.conrelid <> tbl AND c.conrelid <> fk.ref
                     AND l.conname = c.conname
                     -- A partitioned link table once, not once more for each of its partitions.
                     AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid) AND o.conname <> c.conname AND l.ref_cols = fk.ref_cols
                     -- Only a link table the caller may read (both foreign keys' columns), from a
                     -- foreign key of the table it may read.
                     AND tributary._learn_readable(c.conrelid, l.cols || o.cols)
                     AND tributary._learn_readable(tbl, fk.cols)
                   ORDER BY c.conrelid::regclass::text, o.conname LOOP
            pname := format('%s.%s.%s', array_to_string(fk.cols, ','), (SELECT relname FROM pg_class WHERE oid = lk.child),
                            array_to_string(lk.other_cols, ','));
            IF NOT (tributary._learn_trusted(tbl, lk.child) OR pname = ANY (names)) THEN
                untrusted := untrusted || lk.child::text;
                CONTINUE;
            END IF;
            found_paths := found_paths || pname;
            IF NOT tributary._learn_chosen(pname, history) THEN
                CONTINUE;
            END IF;
            ridx := array_position(ref_cols_seen, array_to_string(fk.cols, ',') || '.');
            IF ridx IS NULL THEN
                refs := refs || tributary._learn_key_text('t', fk.cols);
                ref_cols_seen := ref_cols_seen || (array_to_string(fk.cols, ',') || '.');
                ridx := cardinality(refs);
            END IF;
            used_paths := used_paths || pname;
            IF (SELECT c.relowner FROM pg_class c WHERE c.oid = lk.child) <> own THEN
                vouched := vouched || pname;
            END IF;
            -- The record's parent's groups in the link table; the rows whose parents share one.
            cond := format('(%s) IN (SELECT %s FROM %s l2 WHERE (%s) = (%s))', tributary._learn_cols('l', lk.other_cols),
                           tributary._learn_cols('l2', lk.other_cols), lk.child, tributary._learn_cols('l2', lk.cols),
                           tributary._learn_cols('%ROW%', fk.cols));
            related := related || tributary._learn_in(tributary._learn_cols('x', fk.cols), cardinality(fk.cols),
                format('SELECT %s FROM %s l WHERE %s', tributary._learn_cols('l', lk.cols), lk.child, cond));
            wanted := wanted || jsonb_build_array(jsonb_build_array(tbl::oid, to_jsonb(fk.cols)),
                                                  jsonb_build_array(lk.child::oid, to_jsonb(lk.cols)),
                                                  jsonb_build_array(lk.child::oid, to_jsonb(lk.other_cols)));
            links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
                'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                              tributary._learn_key_text('l', lk.other_cols), lk.child),
                'related_sql', format('SELECT %s, %s FROM %s l WHERE %s', tributary._learn_key_text('l', lk.cols),
                              tributary._learn_key_text('l', lk.other_cols), lk.child, cond));
            sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
            reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, fk.cols), lk.child, lk.cols || lk.other_cols);
        END LOOP;
    END LOOP;

    -- Link tables: a table with a foreign key to tbl and another foreign key.
    FOR lk IN SELECT c.conrelid::regclass AS child, l.cols, l.ref_cols, o.cols AS other_cols, o.ref AS other
                FROM pg_constraint c
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) l
                CROSS JOIN LATERAL tributary._learn_fkeys(c.conrelid) o
               WHERE c.confrelid = tbl AND c.contype = 'f' AND c.conrelid <> tbl
                 AND l.conname = c.conname AND o.conname <> c.conname
                 AND NOT (SELECT k.relispartition FROM pg_class k WHERE k.oid = c.conrelid)
                 -- Only a link table the caller may read, joined on keys it may read.
                 AND tributary._learn_readable(c.conrelid, l.cols || o.cols)
                 AND tributary._learn_readable(tbl, l.ref_cols)
               ORDER BY c.conrelid::regclass::text, o.conname LOOP
        pname := format('%s.%s', (SELECT relname FROM pg_class WHERE oid = lk.child), array_to_string(lk.other_cols, ','));
        IF NOT (tributary._learn_trusted(tbl, lk.child) OR pname = ANY (names)) THEN
            untrusted := untrusted || lk.child::text;
            CONTINUE;
        END IF;
        found_paths := found_paths || pname;
        IF NOT tributary._learn_chosen(pname, history) THEN
            CONTINUE;
        END IF;
        ridx := array_position(ref_cols_seen, array_to_string(lk.ref_cols, ','));
        IF ridx IS NULL THEN
            refs := refs || tributary._learn_key_text('t', lk.ref_cols);
            ref_cols_seen := ref_cols_seen || array_to_string(lk.ref_cols, ',');
            ridx := cardinality(refs);
        END IF;
        used_paths := used_paths || pname;
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = lk.child) <> own THEN
            vouched := vouched || pname;
        END IF;
        -- The record's groups in the link table; the rows linked to one of them.
        cond := format('(%s) IN (SELECT %s FROM %s l2 WHERE (%s) = (%s))', tributary._learn_cols('l', lk.other_cols),
                       tributary._learn_cols('l2', lk.other_cols), lk.child, tributary._learn_cols('l2', lk.cols),
                       tributary._learn_cols('%ROW%', lk.ref_cols));
        related := related || tributary._learn_in(tributary._learn_cols('x', lk.ref_cols), cardinality(lk.ref_cols),
            format('SELECT %s FROM %s l WHERE %s', tributary._learn_cols('l', lk.cols), lk.child, cond));
        wanted := wanted || jsonb_build_array(jsonb_build_array(lk.child::oid, to_jsonb(lk.cols)),
                                              jsonb_build_array(lk.child::oid, to_jsonb(lk.other_cols)));
        links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
            'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child),
            'related_sql', format('SELECT %s, %s FROM %s l WHERE %s', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child, cond));
        sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
        reads := tributary._learn_reads(tributary._learn_reads(reads, tbl, lk.ref_cols), lk.child, lk.cols || lk.other_cols);
    END LOOP;

    -- Names asked for that do not exist (cut: a name echoed in a message is at most 64 characters).
    pname := tributary._learn_list(ARRAY(SELECT h FROM unnest(history) h WHERE ltrim(h, '-') <> ALL (found_paths)));
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'history path % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The paths found: %s.', coalesce(nullif(array_to_string(found_paths, ', '), ''), 'none')),
            HINT = 'Paths are named by the foreign key columns they follow (see tributary_train''s documentation); a path through a table of another role is found only when named.';
    END IF;
    pname := tributary._learn_list(ARRAY(SELECT h FROM unnest(columns) h WHERE ltrim(h, '-') <> ALL (found_cols)));
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'feature column % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The typed columns found: %s.', coalesce(nullif(array_to_string(found_cols, ', '), ''), 'none')),
            HINT = 'Columns of numbers, dates, booleans and categories of up to 64 values that the caller may read are features.';
    END IF;

    -- One row's related rows (tributary_predict): the table's rows with the record's key (its
    -- own row: its link groups), and, strictly earlier than it (when as_of), the rows related to
    -- it through each path and the 5k labelled rows nearest to its embedding (%K5%; an HNSW or
    -- IVFFlat index answers the ORDER BY), all through indexes on the key, the foreign keys and
    -- the link tables' columns. Only for a table with a one-column primary key (NULL otherwise:
    -- the prediction reads the whole table).
    pk := (SELECT array_agg(pa.attname ORDER BY k.o) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, o)
             JOIN pg_attribute pa ON pa.attrelid = i.indrelid AND pa.attnum = k.attnum WHERE i.indrelid = tbl AND i.indisprimary);
    -- The unlabelled rows a change of one row (%ROW%: its old or new version) may change the
    -- prediction of: itself, and (when as_of: strictly later) the rows sharing a group with it
    -- through a path (their history, their counts of earlier rows); not the rows whose k-NN votes
    -- it is among. NULL without a one-column primary key.
    cond := format('x.%I IS NULL%s', label, CASE WHEN as_of IS NOT NULL THEN format(' AND x.%I IS NOT NULL', as_of) ELSE '' END);
    affected := CASE WHEN cardinality(pk) = 1 THEN
        format('SELECT x.%I FROM %s x WHERE x.%I = %%ROW%%.%I AND %s', pk[1], tbl, pk[1], pk[1], cond)
        || (SELECT coalesce(string_agg(format(' UNION SELECT x.%I FROM %s x WHERE %s%s AND (%s)', pk[1], tbl, cond,
                                              CASE WHEN as_of IS NOT NULL THEN format(' AND x.%I > %%ROW%%.%I', as_of, as_of) ELSE '' END, r), '' ORDER BY o), '')
              FROM unnest(related) WITH ORDINALITY u(r, o)) END;
    IF embedding IS NOT NULL THEN
        knn_keys := format('SELECT y.%I FROM %s y WHERE y.%I IS NOT NULL AND y.%I IS NOT NULL%s ORDER BY y.%I OPERATOR(%s.<=>) %s.%I LIMIT %%K5%%',
            pk[1], tbl, label, embedding,
            CASE WHEN as_of IS NOT NULL THEN format(' AND y.%I < %%ROW%%.%I', as_of, as_of) ELSE '' END,
            embedding, vec, '%ROW%', embedding);
        related := related || format('x.%I = ANY (ARRAY(%s))', pk[1], knn_keys);
    END IF;
    -- rows_sql's columns after ctid: as_of, label, text, embedding, numbers, categories, groups,
    -- referenced keys.
    sel := ARRAY[as_of_expr,
        CASE kind WHEN 'number' THEN format('CAST(t.%I AS pg_catalog.float8)', label)
                  ELSE format('tributary._text(t.%I)', label) END,
        CASE WHEN cardinality(texts) = 0 THEN 'CAST(NULL AS pg_catalog.text)'
             ELSE format('pg_catalog.concat_ws('' '', %s)', array_to_string(texts, ', ')) END,
        emb_expr,
        CASE WHEN cardinality(nums) = 0 THEN 'CAST(NULL AS pg_catalog.float8[])'
             ELSE format('CAST(%s AS pg_catalog.float8[])', array_to_string(nums, ' OPERATOR(pg_catalog.||) ')) END,
        CASE WHEN cardinality(cats) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
             ELSE format('ARRAY[%s]', array_to_string(cats, ', ')) END,
        CASE WHEN cardinality(groups) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
             ELSE format('ARRAY[%s]', array_to_string(groups, ', ')) END,
        CASE WHEN cardinality(refs) = 0 THEN 'CAST(NULL AS pg_catalog.text[])'
             ELSE format('ARRAY[%s]', array_to_string(refs, ', ')) END];

    RETURN jsonb_build_object(
        -- The indexes one row's prediction wants and the table has none of: an index whose
        -- leading columns are those (a foreign key, with as_of after it for the row's own parents;
        -- a link table's two sides), as CREATE INDEX statements; the embedding's wants an
        -- approximate index (HNSW) with the cosine operator class.
        'missing_indexes', to_jsonb(ARRAY(
            SELECT DISTINCT format('CREATE INDEX ON %s (%s)', CAST(CAST(w ->> 0 AS pg_catalog.oid) AS regclass),
                                   (SELECT string_agg(quote_ident(c), ', ' ORDER BY o) FROM jsonb_array_elements_text(w -> 1) WITH ORDINALITY j(c, o)))
              FROM jsonb_array_elements(wanted) w
             WHERE NOT EXISTS (
                   SELECT 1 FROM pg_index i
                    WHERE i.indrelid = CAST(w ->> 0 AS pg_catalog.oid)
                      AND i.indnkeyatts >= 1
                      AND (SELECT bool_and(i.indkey[j.o - 1] = ia.attnum)
                             FROM jsonb_array_elements_text(w -> 1) WITH ORDINALITY j(c, o)
                             JOIN pg_attribute ia ON ia.attrelid = i.indrelid AND ia.attname = j.c
                            WHERE j.o <= greatest(1, jsonb_array_length(w -> 1) - CASE WHEN as_of IS NOT NULL AND w -> 1 ->> -1 = as_of THEN 1 ELSE 0 END)))
             UNION ALL
            SELECT format('CREATE INDEX ON %s USING hnsw (%I %s.%s)', tbl, embedding, vec,
                          CASE WHEN (tributary._learn_column_type(tbl, embedding)).sql_type LIKE 'halfvec%' THEN 'halfvec_cosine_ops'
                               ELSE 'vector_cosine_ops' END)
             WHERE embedding IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
                                 JOIN pg_attribute ia ON ia.attrelid = i.indrelid AND ia.attnum = i.indkey[0]
                                WHERE i.indrelid = tbl AND ia.attname = embedding AND am.amname IN ('hnsw', 'ivfflat')))),
        'affected_sql', affected,
        'primary_key', pk[1],
        -- A path whose condition is "x.key = ANY (ARRAY(keys))" (the link tables of the table,
        -- the nearest rows) gives its keys as they are; the others their rows' keys, strictly
        -- earlier. The table's rows are then read once each, by key, strictly earlier but for the
        -- record's own (reading each row twice, for its key and then whole, was a third of a
        -- one-row prediction with a thousand related rows).
        'related_sql', CASE WHEN cardinality(pk) = 1 THEN
            format('(SELECT t.* FROM %s t WHERE t.%I = ANY (ARRAY(SELECT %%ROW%%.%I%s))%s)', tbl, pk[1], pk[1],
                   (SELECT string_agg(CASE WHEN starts_with(r, format('x.%I = ANY (ARRAY(', pk[1])) AND right(r, 2) = '))'
                                           THEN format(' UNION (%s)', substr(r, length(format('x.%I = ANY (ARRAY(', pk[1])) + 1,
                                                                              length(r) - length(format('x.%I = ANY (ARRAY(', pk[1])) - 2))
                                           ELSE format(' UNION SELECT x.%I FROM %s x WHERE %s(%s)', pk[1], tbl,
                                                       CASE WHEN as_of IS NOT NULL THEN format('x.%I < %%ROW%%.%I AND ', as_of, as_of) ELSE '' END, r) END,
                                      '' ORDER BY o)
                      FROM unnest(related) WITH ORDINALITY u(r, o)),
                   CASE WHEN as_of IS NOT NULL THEN format(' AND (t.%I = %%ROW%%.%I OR t.%I < %%ROW%%.%I)', pk[1], pk[1], as_of, as_of) ELSE '' END) END,
        'kind', kind,
        'rows_sql', format('SELECT CAST(%s AS pg_catalog.text), %s, %s, %s FROM %%SOURCE%% t ORDER BY CAST(%1$s AS pg_catalog.text) COLLATE pg_catalog."C"',
            key_expr, '%TABLEOID%', '%CTID%', array_to_string(sel, ', ')),
        -- The features of a related row that is neither the record's own nor one of its nearest
        -- are its key, time, label and groups: its text, embedding, numbers and categories are
        -- not read (a prolific person's ~1,500 earlier films, each read whole, were most of a
        -- one-row prediction).
        -- (The nearest rows' keys are found once, in a CTE, not once a column.)
        'related_rows_sql', CASE WHEN cardinality(pk) = 1 THEN
            format('%sSELECT CAST(%s AS pg_catalog.text), %s, %s, %s, %s, %s FROM %%SOURCE%% t%s ORDER BY CAST(%2$s AS pg_catalog.text) COLLATE pg_catalog."C"',
                CASE WHEN knn_keys IS NOT NULL THEN format('WITH nn AS MATERIALIZED (SELECT ARRAY(%s) AS k) ', knn_keys) ELSE '' END,
                key_expr, '%TABLEOID%', '%CTID%', array_to_string(sel[1:2], ', '),
                (SELECT string_agg(format('CASE WHEN %s THEN %s END', format('t.%I = %%ROW%%.%I', pk[1], pk[1])
                                          || CASE WHEN knn_keys IS NOT NULL THEN format(' OR t.%I = ANY (nn.k)', pk[1]) ELSE '' END, e), ', ' ORDER BY o)
                   FROM unnest(sel[3:6]) WITH ORDINALITY u(e, o)),
                array_to_string(sel[7:8], ', '),
                CASE WHEN knn_keys IS NOT NULL THEN ' CROSS JOIN nn' ELSE '' END) END,
        'numbers', to_jsonb(num_names),
        'categories', to_jsonb(cat_names),
        'parents', to_jsonb(group_names),
        'links', links,
        'as_of_sql', as_of_sql,
        'signature', sig,
        'paths', to_jsonb(found_paths),
        'columns', to_jsonb(found_cols),
        'columns_used', to_jsonb(used_cols),
        'paths_used', to_jsonb(used_paths),
        'reads', (SELECT coalesce(jsonb_agg(jsonb_build_array(r.t, r.cols) ORDER BY r.first), '[]')
                    FROM (SELECT CAST(e ->> 0 AS int8) AS t, jsonb_agg(DISTINCT e -> 1) AS cols, min(o) AS first
                            FROM jsonb_array_elements(reads) WITH ORDINALITY x(e, o) GROUP BY 1) r),
        'untrusted', to_jsonb(ARRAY(SELECT DISTINCT u FROM unnest(untrusted) u ORDER BY 1)),
        'vouched', to_jsonb(vouched));
END $$;

ALTER FUNCTION _predict_record(text, anyelement) SET SCHEMA tributary;

-- tributary_predict(predictor text, row [, ...]) → (prediction, confidence, evidence): one row's
-- prediction by a trained predictor (tributary_train), its features as of the row's own as_of.
-- `row` is a row of the predictor's table or of one of its partitions (a whole-row reference, or
-- ROW(...)::tbl for a row not in the table); anything else (an anonymous ROW(...), another
-- table's row) is 42804. The row goes to tributary._predict_record as it is (no text or JSON
-- round trip). See tributary._predict_record (src/api/learn.rs) for the evidence and errors.
-- NULL row gives NULLs.
CREATE FUNCTION tributary_predict(predictor text, "row" anyelement,
    OUT prediction text, OUT confidence float8, OUT evidence jsonb)
RETURNS record LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.prediction, r.confidence, r.evidence
      FROM tributary._predict_record(predictor, "row") r
$$;

-- tributary_predict_trigger(): a BEFORE INSERT OR UPDATE ... FOR EACH ROW trigger function that
-- writes a predictor's prediction of the new row into a column of it, inside the writer's
-- transaction: CREATE TRIGGER t_guess BEFORE INSERT OR UPDATE ON t FOR EACH ROW EXECUTE FUNCTION
-- tributary_predict_trigger('predictor', 'target'). The prediction is tributary_predict's (the
-- row's related rows read through indexes, the row's own label never counted; a few ms a row),
-- as of the row's as_of; NULL when that is NULL. The value becomes the target's type by the
-- type's input function (jsonb_populate_record), never by a cast a role made. Runs as the
-- writer: the writer must be allowed to use the predictor (42501 otherwise). Errors: 39P01
-- called other than as a BEFORE row trigger on INSERT or UPDATE, or without the two arguments;
-- 42703 target is not a column of the table; 22023 target is the predictor's label; and
-- tributary_predict's.
CREATE FUNCTION tributary_predict_trigger() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pred text;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE') OR TG_NARGS <> 2 THEN
        RAISE EXCEPTION 'tributary_predict_trigger() must be a BEFORE INSERT OR UPDATE ... FOR EACH ROW trigger with two arguments'
            USING ERRCODE = '39P01',
                  HINT = 'CREATE TRIGGER ... BEFORE INSERT OR UPDATE ON tbl FOR EACH ROW EXECUTE FUNCTION tributary_predict_trigger(''predictor'', ''target'')';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = TG_RELID AND a.attname = TG_ARGV[1]
                      AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', tributary._learn_short(TG_ARGV[1]), TG_TABLE_NAME
            USING ERRCODE = '42703';
    END IF;
    IF EXISTS (SELECT 1 FROM tributary.predictors p WHERE p.name = TG_ARGV[0] AND p.tbl = TG_RELID AND p.label = TG_ARGV[1]) THEN
        RAISE EXCEPTION 'target must not be the label column "%"', tributary._learn_short(TG_ARGV[1]) USING ERRCODE = '22023',
            HINT = 'Predictions written to the label column would count as labels; write them to another column.';
    END IF;
    SELECT r.prediction INTO pred FROM tributary._predict_record(TG_ARGV[0], NEW) r;
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[1], pred));
    RETURN NEW;
END $$;
COMMENT ON FUNCTION tributary_predict_trigger() IS 'Trigger function: writes a predictor''s prediction of each inserted or updated row into a column of it, in the writer''s transaction.';

COMMENT ON TABLE tributary._predictors IS 'Trained predictors (tributary_train): the serialised models and what they were trained on; read only through tributary''s functions.';
COMMENT ON VIEW tributary.predictors IS 'Trained predictors visible to the current role (its owner, a member of the owner, or a role that may see every row and column it was trained on): options, features, metrics, no model.';
COMMENT ON FUNCTION tributary._learn_short(text) IS 'Internal: a name cut to 64 characters for a message.';
COMMENT ON FUNCTION tributary._learn_list(text[]) IS 'Internal: the first ten names of a list, quoted and cut, for a message.';
COMMENT ON FUNCTION tributary._learn_type(oid) IS 'Internal: a type''s category through domains, and its name when built in.';
COMMENT ON FUNCTION tributary._learn_column_type(regclass, name) IS 'Internal: a column''s format_type, type category and built-in type name.';
COMMENT ON FUNCTION tributary._learn_number(text, "char", name) IS 'Internal: a float8 expression of a number, boolean, date or timestamp expression.';
COMMENT ON FUNCTION tributary._learn_key_text(text, name[]) IS 'Internal: a text expression of key columns (NULL when one is NULL).';
COMMENT ON FUNCTION tributary._learn_fkeys(regclass) IS 'Internal: the foreign keys of a table with their columns.';
COMMENT ON FUNCTION tributary._learn_chosen(text, text[]) IS 'Internal: whether a name is chosen by a list of names or -exclusions (NULL: all).';
COMMENT ON FUNCTION tributary._learn_readable(regclass, name[]) IS 'Internal: whether the caller may read every one of these columns of the relation.';
COMMENT ON FUNCTION tributary._learn_trusted(regclass, regclass) IS 'Internal: whether a predictor over a table may read another table unnamed (owned by the table''s owner or a role the caller is a member of).';
COMMENT ON FUNCTION tributary._learn_reads(jsonb, regclass, name[]) IS 'Internal: the columns a predictor reads, with more added.';
COMMENT ON FUNCTION tributary._learn_rls(oid, oid) IS 'Internal: whether row-level security applies to a role on a table.';
COMMENT ON FUNCTION tributary._predictor_hidden(oid, regclass[], jsonb) IS 'Internal: why a role other than its owner may not use a predictor reading these tables and columns, or NULL.';
COMMENT ON FUNCTION tributary._learn_cols(text, name[]) IS 'Internal: a list of an alias''s columns.';
COMMENT ON FUNCTION tributary._learn_in(text, integer, text) IS 'Internal: columns among the rows of a subquery, in a form an index answers.';
COMMENT ON FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[], text[], boolean, text[]) IS 'Internal: the features of a predictor: the rows query, history paths, typed columns and the columns read.';
COMMENT ON FUNCTION tributary._predict_record(text, anyelement) IS 'Internal: one row''s prediction by a predictor (behind tributary_predict(predictor, row)).';
COMMENT ON FUNCTION tributary_predict(text, anyelement) IS 'One row''s prediction by a trained predictor, its features as of the row''s time, with evidence.';
COMMENT ON FUNCTION tributary_train(text, regclass, name, name, name, text, text[], text[], text, integer) IS 'Trains a predictor of a column over k-NN votes, a TF-IDF model, the as-of label history through foreign keys and typed columns; returns its metrics next to k-NN and the majority baseline.';
COMMENT ON FUNCTION tributary_predict_column(text, name, integer) IS 'Fills a column with a trained predictor''s predictions for the rows whose label is NULL.';
COMMENT ON FUNCTION tributary_predict_column_online(text, name, integer) IS 'Fills a column with a trained predictor''s predictions for every row, labelled or not, each as of its own time (the online protocol).';
COMMENT ON FUNCTION tributary_drop_predictor(text) IS 'Drops a trained predictor (its owner only).';
