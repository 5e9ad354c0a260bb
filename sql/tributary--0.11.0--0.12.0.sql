-- tributary 0.11.0 -> 0.12.0: predictions in time (issue 47), the learning half. Predictors
-- trained from now on build their training rows' label history in forward time blocks (or, when
-- the validation slice says so, from every earlier label), with the age of the newest label and
-- the count of every earlier related row per path, crossed paths, and the month, weekday and
-- hour of a date or timestamp as_of (tributary._learn_spec's time_parts); rows are read in the
-- order of their key, category columns are detected over the whole table, and a column that
-- predictions are written to (a predict job's target, or a column tributary_predict_column
-- wrote: tributary._predictors.outputs) is no feature unless named.
-- tributary_predict_column_online predicts every row, each as of its own time (the online
-- protocol); tributary_predict(predictor, row) reads the row's related rows through indexes;
-- tributary_predict_trigger; predict jobs refresh only the rows a change reaches.
-- Predictors trained before keep their features (their options have no time_parts).
-- Generated from sql/learn.sql and src/api/learn.rs.

ALTER TABLE tributary._predictors ADD COLUMN outputs name[] NOT NULL DEFAULT '{}';

DROP FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[], text[]);

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
COMMENT ON FUNCTION tributary._learn_cols(text, name[]) IS 'Internal: a list of an alias''s columns.';
COMMENT ON FUNCTION tributary._learn_in(text, integer, text) IS 'Internal: columns among the rows of a subquery, in a form an index answers.';
COMMENT ON FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[], text[], boolean, text[]) IS 'Internal: the features of a predictor: the rows query, history paths, typed columns and the columns read.';

-- tributary_predict_column_online(predictor, target [, batch_size]): every row (src/api/learn.rs).
CREATE FUNCTION "tributary_predict_column_online"(
	"predictor" TEXT,
	"target" name,
	"batch_size" INT DEFAULT 1000
) RETURNS bigint
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'tributary_predict_column_online_wrapper';
COMMENT ON FUNCTION tributary_predict_column_online(text, name, integer) IS 'Fills a column with a trained predictor''s predictions for every row, labelled or not, each as of its own time (the online protocol).';

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

-- Predict jobs that refresh only the rows a change reaches (sql/learn_jobs.sql, src/api/learn.rs).
ALTER TABLE tributary._predict_dirty ADD COLUMN changed jsonb;

-- Queues `changed` (the rows of a job's table a statement changed, `n` of them; NULL when there
-- were more than tributary.predict_job_rows: a refresh of every row) for predict job `job` when
-- it is active, and wakes the workers at commit. Called by the row-level triggers below.
CREATE FUNCTION tributary._predict_queue(job bigint, n bigint, changed jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
BEGIN
    IF n > 0 AND EXISTS (SELECT 1 FROM tributary._predict_jobs j WHERE j.id OPERATOR(pg_catalog.=) job
                            AND j.state OPERATOR(pg_catalog.=) 'active') THEN
        INSERT INTO tributary._predict_dirty (job, changed) VALUES (job, changed);
        PERFORM tributary._wake_launcher();
    END IF;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_queue(bigint, bigint, jsonb) FROM PUBLIC;

-- tributary.predict_job_rows (10,000 where the library is not loaded).
CREATE FUNCTION tributary._predict_job_rows() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(CAST(NULLIF(pg_catalog.current_setting('tributary.predict_job_rows', true), '') AS pg_catalog.int8), 10000)
$$;

-- The row-level view of a statement on the job's own table (a table with a one-column primary
-- key): AFTER INSERT / UPDATE / DELETE ... REFERENCING its transition tables (tributary_new,
-- tributary_old) FOR EACH STATEMENT, TG_ARGV = (job, primary key column, target). Queues the
-- changed rows (their new versions, the old versions of deleted and updated rows; an update
-- that changed target alone, such as the job's own writes, is no change), so that the refresh
-- predicts only the rows they reach; more than tributary.predict_job_rows rows in one statement
-- queue a refresh of every row. SECURITY DEFINER, as tributary._predict_trigger.
CREATE FUNCTION tributary._predict_trigger_rows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
DECLARE
    job bigint := CAST(TG_ARGV[0] AS pg_catalog.int8);
    lim bigint := tributary._predict_job_rows();
    changed jsonb;
    n bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(r)) INTO n, changed
          FROM (SELECT * FROM tributary_new LIMIT lim + 1) r;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(r)) INTO n, changed
          FROM (SELECT * FROM tributary_old LIMIT lim + 1) r;
    ELSE
        -- Both versions of each row whose columns other than target changed.
        WITH o AS (SELECT tributary._row_jsonb(r) AS v FROM tributary_old r),
             w AS (SELECT tributary._row_jsonb(r) AS v FROM tributary_new r),
             d AS (SELECT o.v AS ov, w.v AS nv FROM o FULL JOIN w ON (o.v OPERATOR(pg_catalog.->) TG_ARGV[1]) OPERATOR(pg_catalog.=) (w.v OPERATOR(pg_catalog.->) TG_ARGV[1])
                    WHERE (o.v OPERATOR(pg_catalog.-) TG_ARGV[2]) IS DISTINCT FROM (w.v OPERATOR(pg_catalog.-) TG_ARGV[2])
                    LIMIT lim + 1),
             e AS (SELECT d.ov AS v FROM d WHERE d.ov IS NOT NULL UNION ALL SELECT d.nv FROM d WHERE d.nv IS NOT NULL)
        SELECT (SELECT pg_catalog.count(*) FROM d), pg_catalog.jsonb_agg(e.v) INTO n, changed FROM e;
    END IF;
    PERFORM tributary._predict_queue(job, n, CASE WHEN n <= lim THEN changed END);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger_rows() FROM PUBLIC;

-- The same for a link table of the job's table (a foreign key of one column to its one-column
-- primary key, and another foreign key): TG_ARGV = (job, the link table's column referencing the
-- job's table, the job's table, its primary key column). Queues the rows of the job's table that
-- the changed link rows reference, as they are now (their groups through the link table as
-- changed): the refresh predicts the rows those reach. (A removed link's other side is not
-- reached: the next refresh of every row brings its rows up to date.)
CREATE FUNCTION tributary._predict_trigger_links() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $$
DECLARE
    job bigint := CAST(TG_ARGV[0] AS pg_catalog.int8);
    lim bigint := tributary._predict_job_rows();
    changed jsonb;
    n bigint;
BEGIN
    EXECUTE format('SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(tributary._row_jsonb(t)) FROM (SELECT t FROM %s t WHERE t.%I = ANY (ARRAY(%s)) LIMIT %s) s(t)',
                   TG_ARGV[2], TG_ARGV[3],
                   CASE TG_OP WHEN 'INSERT' THEN format('SELECT DISTINCT l.%I FROM tributary_new l', TG_ARGV[1])
                              WHEN 'DELETE' THEN format('SELECT DISTINCT l.%I FROM tributary_old l', TG_ARGV[1])
                              ELSE format('SELECT l.%I FROM tributary_old l UNION SELECT l.%I FROM tributary_new l', TG_ARGV[1], TG_ARGV[1]) END,
                   lim + 1)
       INTO n, changed;
    PERFORM tributary._predict_queue(job, n, CASE WHEN n <= lim THEN changed END);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION tributary._predict_trigger_links() FROM PUBLIC;

COMMENT ON FUNCTION tributary._predict_queue(bigint, bigint, jsonb) IS 'Internal: queues a statement''s changed rows for a predict job and wakes the workers at commit.';
COMMENT ON FUNCTION tributary._predict_job_rows() IS 'Internal: the setting tributary.predict_job_rows, 10000 where the library is not loaded.';
COMMENT ON FUNCTION tributary._predict_trigger_rows() IS 'Internal: the row-level view of a statement on a predict job''s own table (queues the changed rows, wakes the workers at commit).';
COMMENT ON FUNCTION tributary._predict_trigger_links() IS 'Internal: the row-level view of a statement on a link table of a predict job''s table (queues the rows it references).';

CREATE OR REPLACE FUNCTION tributary._predict_job_create(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
    pred   text := a->>'predictor';
    target name := a->>'target';
    p      tributary._predictors;
    tbl_owner oid;
    kind   "char";
    cols   text;
    rel    regclass;
    job    bigint;
    why    text;
    others text[] := '{}';
    pk     name[];
    lcol   name;
BEGIN
    IF pred IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'predictor and target must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO p FROM tributary._predictors x WHERE x.name = pred;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predictor "%" does not exist', tributary._learn_short(pred) USING ERRCODE = 'undefined_object',
            HINT = 'Predictors are listed in tributary.predictors; tributary_train makes one.';
    END IF;
    SELECT c.relowner, c.relkind INTO tbl_owner, kind FROM pg_class c WHERE c.oid = p.tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the table of predictor "%" was dropped', tributary._learn_short(pred) USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(caller, tbl_owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', p.tbl USING ERRCODE = 'insufficient_privilege',
            HINT = 'A predict job writes the table as its owner: its owner (or a member of the owning role) makes it.';
    END IF;
    -- The job uses the predictor as the table's owner: that role must be allowed to.
    IF NOT pg_has_role(tbl_owner, p.owner, 'USAGE') THEN
        why := tributary._predictor_hidden(tbl_owner, p.read_tables, p.read_columns);
        IF why IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied for predictor "%"', tributary._learn_short(pred) USING ERRCODE = 'insufficient_privilege',
                DETAIL = why,
                HINT = 'A predict job uses the predictor as the table''s owner, who must own it (or be a member of its owner) or may see every row and column it was trained on.';
        END IF;
    END IF;
    IF target = p.label THEN
        RAISE EXCEPTION 'target must not be the label column "%"', target USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Predictions written to the label column would count as labels; write them to another column.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = p.tbl AND t.attname = target
                      AND t.attnum > 0 AND NOT t.attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', target, p.tbl USING ERRCODE = 'undefined_column';
    END IF;
    IF EXISTS (SELECT 1 FROM tributary._predict_jobs j WHERE j.tbl = p.tbl AND j.target = target) THEN
        RAISE EXCEPTION 'a predict job already writes column "%" of %', target, p.tbl USING ERRCODE = 'duplicate_object',
            HINT = 'tributary.predict_jobs lists it; tributary_predict_job_drop drops it.';
    END IF;
    INSERT INTO tributary._predict_jobs (predictor, target, tbl, owner, predictor_owner)
    VALUES (pred, target, p.tbl, tbl_owner::regrole, p.owner) RETURNING id INTO job;

    -- On the table: every column but target (the job's own UPDATEs set target only).
    SELECT string_agg(quote_ident(t.attname), ', ' ORDER BY t.attnum) INTO cols
      FROM pg_attribute t
     WHERE t.attrelid = p.tbl AND t.attnum > 0 AND NOT t.attisdropped AND t.attgenerated = ''
       AND t.attname <> target;
    pk := (SELECT array_agg(pa.attname) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) k(attnum)
             JOIN pg_attribute pa ON pa.attrelid = i.indrelid AND pa.attnum = k.attnum WHERE i.indrelid = p.tbl AND i.indisprimary);
    IF kind IN ('r', 'p') AND cardinality(pk) = 1 THEN
        -- The changed rows, through the transition tables: a refresh predicts only the rows they reach.
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_insert', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_update', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS tributary_old FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_rows(%L, %L, %L)',
                       'tributary_predict_' || job || '_delete', p.tbl, job, pk[1], target);
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, p.tbl, job);
    ELSE
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OF %s OR DELETE%s ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, cols,
                       CASE WHEN kind IN ('r', 'p') THEN ' OR TRUNCATE' ELSE '' END, p.tbl, job);
    END IF;
    -- On the tables its history and features read that the table's owner owns: any change.
    -- Another role's table gets no trigger of this job (that role could otherwise start its
    -- refreshes at will, and a trigger on a table is its owner's to make).
    FOR rel IN SELECT r FROM tributary._predict_related(p.tbl) r LOOP
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = rel) <> tbl_owner THEN
            others := others || rel::text;
            CONTINUE;
        END IF;
        -- A link table of the table (row triggers possible): the rows of the table it references.
        lcol := CASE WHEN kind IN ('r', 'p') AND cardinality(pk) = 1 THEN
                    (SELECT f.cols[1] FROM tributary._learn_fkeys(rel) f
                      WHERE f.ref = p.tbl AND cardinality(f.cols) = 1 AND f.ref_cols = pk LIMIT 1) END;
        IF lcol IS NOT NULL AND (SELECT c.relkind FROM pg_class c WHERE c.oid = rel) IN ('r', 'p') THEN
            EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_insert', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_update', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS tributary_old FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger_links(%L, %L, %L, %L)',
                           'tributary_predict_' || job || '_delete', rel, job, lcol, p.tbl, pk[1]);
            EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                           'tributary_predict_' || job, rel, job);
            CONTINUE;
        END IF;
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary._predict_trigger(%L)',
                       'tributary_predict_' || job, rel, job);
    END LOOP;
    IF cardinality(others) > 0 THEN
        RAISE NOTICE 'predict job % does not watch %, owned by other roles than %', job, array_to_string(others, ', '), tbl_owner::regrole
            USING DETAIL = 'A change there refreshes the predictions only with the next change to a table the job watches.';
    END IF;
    -- The first refresh fills the rows there now.
    INSERT INTO tributary._predict_dirty (job) VALUES (job);
    PERFORM tributary._wake_launcher();
    RETURN job;
END $fn$;

CREATE OR REPLACE FUNCTION tributary._predict_job_drop(caller oid, a jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    job bigint := (a->>'job')::bigint;
    j   tributary._predict_jobs;
    t   record;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO j FROM tributary._predict_jobs x
     WHERE x.id = job
       AND pg_has_role(caller, coalesce((SELECT c.relowner FROM pg_class c WHERE c.oid = x.tbl), x.owner), 'USAGE')
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'predict job % does not exist', job USING ERRCODE = 'undefined_object',
            HINT = 'Your predict jobs are listed in tributary.predict_jobs.';
    END IF;
    FOR t IN SELECT g.tgrelid::regclass AS rel, g.tgname FROM pg_trigger g
              WHERE g.tgname IN ('tributary_predict_' || j.id, 'tributary_predict_' || j.id || '_insert',
                                 'tributary_predict_' || j.id || '_update', 'tributary_predict_' || j.id || '_delete')
                AND g.tgfoid IN ('tributary._predict_trigger()'::regprocedure, 'tributary._predict_trigger_rows()'::regprocedure,
                                 'tributary._predict_trigger_links()'::regprocedure) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
    DELETE FROM tributary._predict_jobs WHERE id = j.id;
    RETURN j.id;
END $$;

CREATE FUNCTION tributary._predict_rows_job(
	"predictor" TEXT,
	"target" name,
	"tbl" oid,
	"predictor_owner" oid,
	"changed" jsonb
) RETURNS bigint
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', '_predict_rows_job_wrapper';
COMMENT ON FUNCTION tributary._predict_rows_job(text, name, oid, oid, jsonb) IS 'Internal: a predict job''s refresh of the rows a few changed rows reach.';

-- tributary.sessions: the split of a call's time (issue 49): input shapes run (each has a
-- one-time cost on a GPU), ms reading rows and writing vectors (tributary_embed_column), ms
-- spent warming shapes (tributary.gpu_warm_shapes).
DROP VIEW tributary.sessions;
DROP FUNCTION tributary_sessions();
CREATE FUNCTION "tributary_sessions"() RETURNS TABLE (
	"model" TEXT,
	"execution_provider" TEXT,
	"provider_note" TEXT,
	"gpu_slot" INT,
	"model_file" TEXT,
	"output_type" TEXT,
	"io_binding" bool,
	"io_binding_note" TEXT,
	"runs" bigint,
	"rows" bigint,
	"tokens" bigint,
	"padded_tokens" bigint,
	"run_ms" double precision,
	"tokenize_wait_ms" double precision,
	"shapes" bigint,
	"read_ms" double precision,
	"write_ms" double precision,
	"warm_up_ms" double precision
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'tributary_sessions_wrapper';
CREATE VIEW tributary.sessions AS SELECT * FROM tributary_sessions();
GRANT SELECT ON tributary.sessions TO PUBLIC;
COMMENT ON FUNCTION tributary_sessions() IS 'This backend''s ONNX Runtime sessions: execution provider and why, GPU slot, graph, output type, IoBinding, runs, rows, tokens, padded tokens, ms in ONNX Runtime, ms waiting for tokenization, input shapes run, ms reading rows and writing vectors (tributary_embed_column), ms warming shapes.';
COMMENT ON VIEW tributary.sessions IS 'This backend''s ONNX Runtime sessions (tributary_sessions()).';
