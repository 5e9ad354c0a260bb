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

-- Matching: candidate recall measured on every call (issue 48): tributary._match_recall, and
-- tributary._match_pairs reporting it (tributary_match_explain()'s candidate_recall, the NOTICE).
-- Generated from sql/match.sql.
CREATE FUNCTION tributary._match_recall(self boolean, emb boolean[], str boolean[], columns text[], vec text,
                                        sample integer) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    i int;
    found bigint;
    total bigint;
    per jsonb := '[]';
    all_found bigint := 0;
    all_total bigint := 0;
    -- a candidate of row s whose other row r holds `cond` (pairs of one table: either side)
    cand text := 'EXISTS (SELECT 1 FROM pg_temp.tributary_match_c c JOIN pg_temp.tributary_match_r r ON r.key = c.rk
                           WHERE c.lk = s.key AND c.kind = ''c'' AND %1$s)
                  OR ($2 AND EXISTS (SELECT 1 FROM pg_temp.tributary_match_c c JOIN pg_temp.tributary_match_r r ON r.key = c.lk
                                      WHERE c.rk = s.key AND c.kind = ''c'' AND %1$s))';
BEGIN
    IF self THEN
        CREATE INDEX ON pg_temp.tributary_match_c (rk);
    END IF;
    FOR i IN 1 .. cardinality(columns) LOOP
        IF emb[i] THEN
            EXECUTE format(
                'WITH s AS (SELECT l.key, l.v[$1] AS val FROM pg_temp.tributary_match_l l
                             WHERE l.v[$1] IS NOT NULL ORDER BY md5(l.key) LIMIT $3),
                      rv AS MATERIALIZED (
                          SELECT x.val, x.holders, x.holder, v.e
                            FROM (SELECT r.v[$1] AS val, count(*) AS holders, min(r.key) AS holder
                                    FROM pg_temp.tributary_match_r r WHERE r.v[$1] IS NOT NULL GROUP BY 1) x
                            JOIN pg_temp.tributary_match_v v ON v.col = $1 AND v.val = x.val
                           WHERE v.e IS NOT NULL)
                 SELECT count(*) FILTER (WHERE f.found), count(*)
                   FROM s
                   JOIN pg_temp.tributary_match_v sv ON sv.col = $1 AND sv.val = s.val AND sv.e IS NOT NULL
                  CROSS JOIN LATERAL (SELECT b.val FROM rv b
                                       WHERE NOT ($2 AND b.holders = 1 AND b.holder = s.key)
                                       ORDER BY b.e OPERATOR(%2$s.<=>) sv.e LIMIT 1) best
                  CROSS JOIN LATERAL (SELECT (%1$s) AS found) f',
                format(cand, 'r.v[$1] = best.val AND r.key <> s.key'), vec)
              INTO found, total USING i, self, sample;
        ELSIF str[i] THEN
            EXECUTE format(
                'WITH s AS (SELECT l.key, lower(l.v[$1]) AS val FROM pg_temp.tributary_match_l l
                             WHERE l.v[$1] IS NOT NULL ORDER BY md5(l.key) LIMIT $3),
                      rv AS MATERIALIZED (SELECT lower(r.v[$1]) AS val, count(*) AS holders, min(r.key) AS holder
                                            FROM pg_temp.tributary_match_r r WHERE r.v[$1] IS NOT NULL GROUP BY 1)
                 SELECT count(*) FILTER (WHERE f.found), count(*)
                   FROM s JOIN rv ON rv.val = s.val AND NOT ($2 AND rv.holders = 1 AND rv.holder = s.key)
                  CROSS JOIN LATERAL (SELECT (%s) AS found) f',
                format(cand, 'lower(r.v[$1]) = s.val AND r.key <> s.key'))
              INTO found, total USING i, self, sample;
        ELSE
            CONTINUE;
        END IF;
        all_found := all_found + found;
        all_total := all_total + total;
        per := per || jsonb_build_array(jsonb_build_object(
            'column', columns[i], 'rows', total, 'found', found,
            'recall', CASE WHEN total > 0 THEN round(found::numeric / total, 4) END));
    END LOOP;
    RETURN jsonb_build_object(
        'sample_rows', (SELECT count(*) FROM (SELECT 1 FROM pg_temp.tributary_match_l LIMIT sample) x),
        'recall', CASE WHEN all_total > 0 THEN round(all_found::numeric / all_total, 4) END,
        'columns', per);
END $$;
COMMENT ON FUNCTION tributary._match_recall(boolean, boolean[], boolean[], text[], text, integer) IS 'Internal (tributary_match): candidate recall, the share of the rows one column alone ranks first that are among the candidates, on a sample of rows.';

CREATE OR REPLACE FUNCTION tributary._match_pairs(
    left_table regclass, right_table regclass, columns text[], right_columns text[],
    k integer, threshold float8, one_to_one boolean, labels regclass, model text, min_precision float8,
    all_pairs boolean)
RETURNS TABLE (left_key text, right_key text, score float8, accepted boolean, evidence jsonb)
LANGUAGE plpgsql VOLATILE SET jit = off SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    vec text := tributary._vector_schema();
    self boolean;
    rcols text[];
    n int;
    dims int;
    n_left bigint;
    n_right bigint;
    emb bool[];
    str bool[];
    thr float8;
    how text;
    old_ef text := current_setting('hnsw.ef_search', true);
    old_iter text := current_setting('hnsw.iterative_scan', true);
    report boolean;
    near text;
    same text;
    fill_sql text;
    sum_sql text;
    sum_cols text;
    zero text;
    made oid[] := '{}';   -- the temporary tables and view this call made, to drop (never a caller's)
    pair_order text;
    i int;
    j int;
    t_off int;
    ei int;
    n_emb int;
    n_str int;
    stored boolean[];
    t0 timestamptz := clock_timestamp();   -- stage times for the NOTICE: embedding, candidates, evidence
    t_embed float8;
    t_cand float8;
    n_cand bigint;
    n_acc bigint;
    n_lab int;
    nlev int;
    fit_p float8[];
    fit_prior float8;
    fit_partnered float8[];
    fit_m float8[];
    fit_u float8[];
    fit_bounds float8[];
    fit_iter int;
    fit_conv boolean;
    est float8;
    acc_sum float8;
    exp_prec float8;
    exp_rec float8;
    col_info jsonb; cand_recall jsonb;
    explanation jsonb;
BEGIN
    IF left_table IS NULL OR right_table IS NULL OR columns IS NULL OR k IS NULL OR one_to_one IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN left_table IS NULL THEN 'left_table' WHEN right_table IS NULL THEN 'right_table'
                 WHEN columns IS NULL THEN 'columns' WHEN k IS NULL THEN 'k' ELSE 'one_to_one' END
            USING ERRCODE = '22004';
    END IF;
    rcols := coalesce(right_columns, columns);
    n := cardinality(columns);
    IF n = 0 OR array_ndims(columns) > 1 THEN
        RAISE EXCEPTION 'columns must name at least one column' USING ERRCODE = '22023';
    END IF;
    IF cardinality(rcols) <> n OR array_ndims(rcols) > 1 THEN
        RAISE EXCEPTION 'right_columns has % columns, columns has %', cardinality(rcols), n USING ERRCODE = '22023',
            HINT = 'The lists pair up by position: the right table''s column for each of columns, in the same order.';
    END IF;
    IF k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, not %', k USING ERRCODE = '22023',
            HINT = 'k is the number of candidates per row and direction; 10 is usually enough.';
    END IF;
    IF threshold < 0 OR threshold > 1 THEN
        RAISE EXCEPTION 'threshold must be between 0 and 1, not %', threshold USING ERRCODE = '22023',
            HINT = 'Leave it NULL to accept the pairs whose probability of a match is 0.5 or more.';
    END IF;
    IF min_precision <= 0 OR min_precision > 1 THEN
        RAISE EXCEPTION 'min_precision must be above 0 and at most 1, not %', min_precision USING ERRCODE = '22023',
            HINT = 'It is the share of the accepted pairs that should be matches, as the model expects it: 0.99, say.';
    END IF;
    IF threshold IS NOT NULL AND min_precision IS NOT NULL THEN
        RAISE EXCEPTION 'threshold and min_precision cannot both be given' USING ERRCODE = '22023',
            HINT = 'threshold cuts the probabilities where you say; min_precision has the cut chosen for an expected precision.';
    END IF;
    self := left_table = right_table;

    -- 1. The rows of each side: key, values, the joined text, its embedding.
    PERFORM tributary._match_names_free('tributary_match_');
    -- (the dimension through pgvector's cast to real[]: no function of pgvector's schema is
    -- looked up by name)
    dims := pg_catalog.array_length(CAST(tributary._embed_text('dimension', model) AS pg_catalog.float4[]), 1);
    -- Defined now that the library is loaded: '0' turns progress NOTICEs off.
    report := current_setting('tributary.progress_interval') <> '0';
    EXECUTE format('CREATE TEMP TABLE tributary_match_l (key text PRIMARY KEY, v text[], e %s.vector(%s))
                    ON COMMIT DROP', vec, dims);
    made := made || 'pg_temp.tributary_match_l'::regclass::oid;
    -- A side's rows: key and values (the embedding comes in step 2).
    fill_sql := 'INSERT INTO pg_temp.tributary_match_%s (key, v)
             SELECT %s, %s FROM %s AS t';
    EXECUTE format(fill_sql, 'l', tributary._match_key(left_table, 't'), tributary._match_values(left_table, columns, 't'),
                   left_table);
    IF self THEN
        CREATE TEMP VIEW tributary_match_r AS SELECT * FROM pg_temp.tributary_match_l;
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
    ELSE
        CREATE TEMP TABLE tributary_match_r (LIKE pg_temp.tributary_match_l INCLUDING ALL) ON COMMIT DROP;
        made := made || 'pg_temp.tributary_match_r'::regclass::oid;
        EXECUTE format(fill_sql, 'r', tributary._match_key(right_table, 't'), tributary._match_values(right_table, rcols, 't'),
                       right_table);
    END IF;
    SELECT count(*) INTO n_left FROM pg_temp.tributary_match_l;
    SELECT count(*) INTO n_right FROM pg_temp.tributary_match_r;
    IF n_left = 0 OR n_right = 0 OR (self AND n_left < 2) THEN
        PERFORM tributary._match_remember(jsonb_build_object(
            'left_table', left_table::text, 'right_table', right_table::text,
            'rows', jsonb_build_array(n_left, n_right), 'candidate_pairs', 0, 'accepted', 0,
            'how', 'nothing to match'));
        PERFORM tributary._match_drop(made);
        RETURN;
    END IF;
    -- 2. Which columns are phrases (embedded: 3 words or more on average, mostly letters) and
    -- which are short (string similarity: 64 characters or fewer on average, or not phrases).
    SELECT array_agg(coalesce(p.words >= 3 AND p.letters >= 0.5, false) ORDER BY p.i),
           array_agg(coalesce(p.len <= 64 OR NOT (p.words >= 3 AND p.letters >= 0.5), true) ORDER BY p.i)
      INTO emb, str
      FROM (SELECT c.i, avg(array_length(regexp_split_to_array(x.v[c.i], '\s+'), 1)) AS words,
                   avg(length(x.v[c.i])) AS len, avg((x.v[c.i] ~ '[[:alpha:]]')::int) AS letters
              FROM generate_series(1, n) c(i)
              LEFT JOIN (SELECT v FROM pg_temp.tributary_match_l UNION ALL
                         SELECT v FROM pg_temp.tributary_match_r WHERE NOT self) x ON x.v[c.i] IS NOT NULL
             GROUP BY c.i) p;
    -- A vector column is an embedding the caller stored: a phrase column, compared by it only.
    stored := tributary._match_stored(left_table, columns);
    IF stored IS DISTINCT FROM tributary._match_stored(right_table, rcols) THEN
        RAISE EXCEPTION 'a matched column is a vector on one side only' USING ERRCODE = '42804',
            DETAIL = format('vector columns: %s of %s, %s of %s', left_table,
                            (SELECT string_agg(c, ', ') FROM unnest(columns, stored) x(c, s) WHERE s), right_table,
                            (SELECT string_agg(c, ', ') FROM unnest(rcols, tributary._match_stored(right_table, rcols)) x(c, s) WHERE s)),
            HINT = 'Pair a stored embedding with the other table''s embedding of the same column, by the same model.';
    END IF;
    FOR i IN 1 .. n LOOP
        IF stored[i] THEN
            emb[i] := true;
            str[i] := false;
        END IF;
    END LOOP;
    n_emb := coalesce(cardinality(array_positions(emb, true)), 0);
    -- Each phrase column's distinct values, embedded once.
    -- (a hash index on the value: a btree's entries stop at 2,704 bytes, less than a long value
    -- or a stored embedding's text)
    EXECUTE format('CREATE TEMP TABLE tributary_match_v (col int, val text, e %s.vector(%s)) ON COMMIT DROP', vec, dims);
    made := made || 'pg_temp.tributary_match_v'::regclass::oid;
    -- (a stored embedding is taken as it is: of another dimension than the model's, pgvector's
    -- 22000 says so)
    EXECUTE format(
        'INSERT INTO pg_temp.tributary_match_v (col, val, e)
         SELECT DISTINCT c.i, x.v[c.i], CASE WHEN $2[c.i] THEN x.v[c.i]::%s.vector END
           FROM generate_series(1, $3) c(i),
                LATERAL (SELECT v FROM pg_temp.tributary_match_l UNION ALL SELECT v FROM pg_temp.tributary_match_r WHERE NOT $4) x
          WHERE $1[c.i] AND x.v[c.i] IS NOT NULL', vec)
      USING emb, stored, n, self;
    CREATE INDEX ON pg_temp.tributary_match_v USING hash (val);
    ANALYZE pg_temp.tributary_match_v;
    IF n_emb > 0 THEN
        PERFORM tributary._embed_column('pg_temp.tributary_match_v', '{val}', 'e', model => model);
    END IF;
    -- The rows' embeddings, for the nearest-neighbour candidates: of the phrase columns only
    -- (short columns find candidates by blocking, step 3). One phrase column: its value's
    -- embedding; several: the sum of their values' embeddings (no second pass of the model over
    -- longer texts; the direction of their normalised sum); none: none.
    IF n_emb = 1 THEN
        ei := array_position(emb, true);
        UPDATE pg_temp.tributary_match_l l SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = l.v[ei];
        IF NOT self THEN
            UPDATE pg_temp.tributary_match_r r SET e = v.e FROM pg_temp.tributary_match_v v WHERE v.col = ei AND v.val = r.v[ei];
        END IF;
    ELSIF n_emb > 1 THEN
        -- (the sum through pgvector's + operator, not its sum() and l2_normalize(): no function
        -- of pgvector's schema is called by name, where another role could add an overload that
        -- makes the call ambiguous, 42725; the length does not matter, only cosine distances
        -- read these embeddings)
        SELECT format('CASE WHEN pg_catalog.num_nonnulls(%s) OPERATOR(pg_catalog.>) 0 THEN %s END',
                      string_agg(format('s.e%s', c.p), ', ' ORDER BY c.p),
                      string_agg(format('coalesce(s.e%s, $1::%s.vector)', c.p, vec), format(' OPERATOR(%s.+) ', vec) ORDER BY c.p)),
               string_agg(format('(SELECT v.e FROM pg_temp.tributary_match_v v WHERE v.col = %s AND v.val = x.v[%s]) AS e%s',
                                 c.p, c.p, c.p), ', ' ORDER BY c.p)
          INTO sum_sql, sum_cols
          FROM unnest(array_positions(emb, true)) c(p);
        zero := '[' || array_to_string(array_fill(0, ARRAY[dims]), ',') || ']';
        EXECUTE format('UPDATE pg_temp.tributary_match_l x SET e = (SELECT %s FROM (SELECT %s) s)', sum_sql, sum_cols)
          USING zero;
        IF NOT self THEN
            EXECUTE format('UPDATE pg_temp.tributary_match_r x SET e = (SELECT %s FROM (SELECT %s) s)', sum_sql, sum_cols)
              USING zero;
        END IF;
    END IF;

    t_embed := extract(epoch FROM clock_timestamp() - t0);
    -- 3. Candidates: k nearest each way, and the unrelated pairs that calibrate the evidence.
    CREATE TEMP TABLE tributary_match_c (lk text, rk text, kind "char", PRIMARY KEY (lk, rk, kind)) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_c'::regclass::oid;
    -- pgvector takes hnsw.ef_search up to 1000: k up to 500 gets 2k candidates, beyond that 1000
    -- (iterative scans go on past ef_search when the filter leaves fewer than k).
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(40, 2 * k))::text, true);
    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    IF n_left > 2000 AND n_emb > 0 THEN
        EXECUTE format('CREATE INDEX ON pg_temp.tributary_match_l USING hnsw (e %s.vector_cosine_ops)', vec);
    END IF;
    IF n_right > 2000 AND n_emb > 0 AND NOT self THEN
        EXECUTE format('CREATE INDEX ON pg_temp.tributary_match_r USING hnsw (e %s.vector_cosine_ops)', vec);
    END IF;
    ANALYZE pg_temp.tributary_match_l;
    IF NOT self THEN
        ANALYZE pg_temp.tributary_match_r;
    END IF;
    -- In one table a pair is stored once, smaller key first.
    pair_order := CASE WHEN self THEN 'least(a, b), greatest(a, b)' ELSE 'a, b' END;
    near := 'SELECT %s, ''c'' FROM (SELECT x.key AS a, y.key AS b FROM pg_temp.tributary_match_%s x
                 CROSS JOIN LATERAL (SELECT z.key FROM pg_temp.tributary_match_%s z
                                      WHERE z.e IS NOT NULL%s
                                      ORDER BY z.e OPERATOR(%s.<=>) x.e LIMIT %s) y
                WHERE x.e IS NOT NULL) p ON CONFLICT DO NOTHING';
    -- Never a row with itself; two tables' rows with equal keys are candidates like any others.
    same := CASE WHEN self THEN ' AND z.key <> x.key' ELSE '' END;
    IF n_emb > 0 THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, pair_order, 'l', 'r', same, vec, k);
    END IF;
    IF NOT self AND n_emb > 0 THEN
        EXECUTE 'INSERT INTO pg_temp.tributary_match_c ' || format(near, 'b, a', 'r', 'l', same, vec, k);
    END IF;
    -- And blocking on rare values: pairs that agree exactly (case aside) on a short column's
    -- value, or on the values of two short columns, that at most k rows of each side hold (an
    -- id, a date, a phone number; a surname with a postcode): at most rows x k pairs a key, and
    -- a pair whose values all have typing errors but two is still found.
    n_str := coalesce(cardinality(array_positions(str, true)), 0);
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN NOT str[i];
        FOR j IN i .. n LOOP
            -- (two columns' values together only up to 12 short columns: 78 keys at most)
            CONTINUE WHEN NOT str[j] OR (j > i AND n_str > 12);
            EXECUTE format(
                'INSERT INTO pg_temp.tributary_match_c
                 WITH lv AS (SELECT key, lower(v[$1] || chr(31) || CASE WHEN $2 = $1 THEN '''' ELSE v[$2] END) AS x
                               FROM pg_temp.tributary_match_l WHERE v[$1] IS NOT NULL AND v[$2] IS NOT NULL),
                      rv AS (SELECT key, lower(v[$1] || chr(31) || CASE WHEN $2 = $1 THEN '''' ELSE v[$2] END) AS x
                               FROM pg_temp.tributary_match_r WHERE v[$1] IS NOT NULL AND v[$2] IS NOT NULL),
                      rare AS (SELECT x FROM lv GROUP BY x HAVING count(*) <= $3
                               INTERSECT SELECT x FROM rv GROUP BY x HAVING count(*) <= $3)
                 SELECT %s, ''c'' FROM (SELECT lv.key AS a, rv.key AS b FROM lv JOIN rv ON rv.x = lv.x
                                         WHERE lv.x IN (SELECT x FROM rare) AND (NOT $4 OR lv.key <> rv.key)) p
                 ON CONFLICT DO NOTHING', pair_order)
              USING i, j, k, self;
        END LOOP;
    END LOOP;
    -- Small tables: every pair is a candidate (at most 50,000 pairs), so none is missed.
    IF (CASE WHEN self THEN n_left * (n_left - 1) / 2 ELSE n_left * n_right END) <= 50000 THEN
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             SELECT %s, ''c'' FROM (SELECT l.key AS a, r.key AS b FROM pg_temp.tributary_match_l l, pg_temp.tributary_match_r r
                                     WHERE NOT $1 OR l.key < r.key) p
             ON CONFLICT DO NOTHING', pair_order)
          USING self;
    END IF;
    PERFORM set_config('hnsw.ef_search', coalesce(nullif(old_ef, ''), '40'), true);
    PERFORM set_config('hnsw.iterative_scan', coalesce(nullif(old_iter, ''), 'off'), true);
    -- Unrelated pairs, which give u (how often two rows that are not the same thing agree):
    -- about 10,000 pairs (every pair of small tables), rows of both sides in md5(key) order,
    -- row i of the left with rows i + n/2 + t n/T of the right for T offsets t: deterministic,
    -- spread over both sides, and almost never a true pair.
    t_off := least(n_right, greatest(1, ceil(10000.0 / n_left)))::int;
    INSERT INTO pg_temp.tributary_match_c
    SELECT l.key, r.key, 'u'
      FROM (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i FROM pg_temp.tributary_match_l) l
     CROSS JOIN generate_series(0, t_off - 1) t(t)
      JOIN (SELECT key, row_number() OVER (ORDER BY md5(key)) - 1 AS i FROM pg_temp.tributary_match_r) r
        ON r.i = (l.i + n_right / 2 + t.t * n_right / t_off) % n_right
     WHERE l.i < ceil(10000.0 / t_off) AND l.key <> r.key
    ON CONFLICT DO NOTHING;
    IF labels IS NOT NULL THEN
        PERFORM tributary._match_check_labels(labels);
        EXECUTE format(
            'INSERT INTO pg_temp.tributary_match_c
             SELECT %s, CASE WHEN bool_or(s.is_match) THEN ''m'' ELSE ''n'' END
               FROM (SELECT tributary._text(x.left_key) AS a, tributary._text(x.right_key) AS b, x.is_match
                       FROM %s x WHERE x.is_match IS NOT NULL) s
              WHERE s.a IN (SELECT key FROM pg_temp.tributary_match_l) AND s.b IN (SELECT key FROM pg_temp.tributary_match_r)
                AND (NOT $1 OR s.a <> s.b)
              GROUP BY 1, 2
             ON CONFLICT DO NOTHING', pair_order, labels) USING self;
    END IF;

    -- How many of the rows that one column alone ranks first are among the candidates.
    cand_recall := tributary._match_recall(self, emb, str, columns, vec, 200);
    t_cand := extract(epoch FROM clock_timestamp() - t0) - t_embed;
    -- 4. Evidence per column: raw similarities, rescaled by the unrelated pairs, weighted.
    EXECUTE format(
        'CREATE TEMP TABLE tributary_match_f ON COMMIT DROP AS
         SELECT c.lk, c.rk, c.kind, i.i,
                CASE WHEN $1[i.i] AND l.v[i.i] IS NOT NULL AND r.v[i.i] IS NOT NULL THEN
                     CASE WHEN l.v[i.i] = r.v[i.i] THEN 1 ELSE 1 - (vl.e OPERATOR(%1$s.<=>) vr.e) END END AS es,
                CASE WHEN $2[i.i] THEN tributary._string_similarity(l.v[i.i], r.v[i.i]) END AS ss
           FROM pg_temp.tributary_match_c c
           JOIN pg_temp.tributary_match_l l ON l.key = c.lk
           JOIN pg_temp.tributary_match_r r ON r.key = c.rk
          CROSS JOIN generate_series(1, $3) i(i)
           LEFT JOIN pg_temp.tributary_match_v vl ON $1[i.i] AND vl.col = i.i AND vl.val = l.v[i.i]
           LEFT JOIN pg_temp.tributary_match_v vr ON $1[i.i] AND vr.col = i.i AND vr.val = r.v[i.i]', vec)
      USING emb, str, n;
    made := made || 'pg_temp.tributary_match_f'::regclass::oid;
    -- u: the mean raw similarity of unrelated pairs; evidence = the larger of the rescaled ones
    -- (a name with a typing error is far in embedding space and near by edit distance); a
    -- missing value stays missing (least and greatest skip NULLs: test for it first).
    WITH u AS (SELECT f.i, avg(f.es) AS ue, avg(f.ss) AS us FROM pg_temp.tributary_match_f f WHERE f.kind = 'u' GROUP BY f.i)
    UPDATE pg_temp.tributary_match_f f
       SET es = greatest(CASE WHEN f.es IS NOT NULL AND u.ue < 0.99 THEN greatest(0, least(1, (f.es - u.ue) / (1 - u.ue))) END,
                         CASE WHEN f.ss IS NOT NULL AND u.us < 0.99 THEN greatest(0, least(1, (f.ss - u.us) / (1 - u.us))) END)
      FROM u WHERE u.i = f.i;
    CREATE TEMP TABLE tributary_match_s (lk text, rk text, kind "char", score float8) ON COMMIT DROP;
    made := made || 'pg_temp.tributary_match_s'::regclass::oid;
    SELECT count(*) INTO n_cand FROM pg_temp.tributary_match_c c WHERE c.kind = 'c';
    SELECT count(*) INTO n_lab FROM pg_temp.tributary_match_c c WHERE c.kind IN ('m', 'n');
    IF labels IS NOT NULL AND n_lab = 0 THEN
        RAISE EXCEPTION 'no labelled pair of "%" names rows of both tables', labels USING ERRCODE = '22023',
            HINT = 'left_key and right_key hold primary key values as text (id::text, a composite key as (a,b)).';
    END IF;
    IF n_cand > 0 THEN
        -- 5. The match probability without labels: the two-class model fitted by EM
        -- (tributary._match_em) to every candidate pair's evidence, the rows numbered in one
        -- space (a row of one table is one number however many pairs it is in).
        CREATE TEMP TABLE tributary_match_n ON COMMIT DROP AS
        SELECT 'l'::text AS side, l.key, (row_number() OVER (ORDER BY l.key) - 1)::int AS i FROM pg_temp.tributary_match_l l
        UNION ALL
        SELECT 'r', r.key, (n_left + row_number() OVER (ORDER BY r.key) - 1)::int FROM pg_temp.tributary_match_r r WHERE NOT self;
        made := made || 'pg_temp.tributary_match_n'::regclass::oid;
        SELECT em.p, em.prior, em.partnered, em.m, em.u, em.bounds, em.iterations, em.converged
          INTO fit_p, fit_prior, fit_partnered, fit_m, fit_u, fit_bounds, fit_iter, fit_conv
          FROM (SELECT array_agg(nl.i ORDER BY c.lk, c.rk) AS a, array_agg(nr.i ORDER BY c.lk, c.rk) AS b
                  FROM pg_temp.tributary_match_c c
                  JOIN pg_temp.tributary_match_n nl ON nl.side = 'l' AND nl.key = c.lk
                  JOIN pg_temp.tributary_match_n nr ON nr.side = CASE WHEN self THEN 'l' ELSE 'r' END AND nr.key = c.rk
                 WHERE c.kind = 'c') p,
               (SELECT array_agg(f.es ORDER BY f.lk, f.rk, f.i) AS x FROM pg_temp.tributary_match_f f WHERE f.kind = 'c') x,
               (SELECT coalesce(array_agg(f.es ORDER BY f.lk, f.rk, f.i), '{}') AS ux FROM pg_temp.tributary_match_f f WHERE f.kind = 'u') ux,
               (SELECT coalesce(array_agg(f.es ORDER BY f.lk, f.rk, f.i), '{}') AS lx FROM pg_temp.tributary_match_f f WHERE f.kind IN ('m', 'n')) lx,
               (SELECT coalesce(array_agg(c.kind = 'm' ORDER BY c.lk, c.rk), '{}') AS ly FROM pg_temp.tributary_match_c c WHERE c.kind IN ('m', 'n')) ly,
               LATERAL tributary._match_em(p.a, p.b, x.x, ux.ux, lx.lx, ly.ly, n_left, n_right, self, one_to_one) em;
        nlev := cardinality(fit_bounds) + 1;
        INSERT INTO pg_temp.tributary_match_s
        SELECT q.lk, q.rk, 'c', fit_p[q.o]
          FROM (SELECT c.lk, c.rk, row_number() OVER (ORDER BY c.lk, c.rk) AS o FROM pg_temp.tributary_match_c c WHERE c.kind = 'c') q;
        -- A labelled pair among the candidates has its label's probability; one to one, a row
        -- with a labelled partner has no other.
        IF labels IS NOT NULL THEN
            IF one_to_one THEN
                UPDATE pg_temp.tributary_match_s s SET score = 0
                 WHERE s.lk IN (SELECT c.lk FROM pg_temp.tributary_match_c c WHERE c.kind = 'm')
                    OR s.rk IN (SELECT c.rk FROM pg_temp.tributary_match_c c WHERE c.kind = 'm');
            END IF;
            UPDATE pg_temp.tributary_match_s s SET score = (c.kind = 'm')::int
              FROM pg_temp.tributary_match_c c
             WHERE c.kind IN ('m', 'n') AND c.lk = s.lk AND c.rk = s.rk;
        END IF;
    END IF;

    -- 6. The cut: given, or the lowest whose accepted pairs have a mean probability (the
    -- model's expected precision) of min_precision or more, or probability 0.5.
    IF threshold IS NOT NULL THEN
        thr := threshold; how := 'given';
    ELSIF min_precision IS NOT NULL THEN
        SELECT tributary._match_cut(array_agg(a.score), min_precision) INTO thr
          FROM tributary._match_accepted(self, 0, one_to_one) a;
        how := format('the lowest cut with an expected precision of %s or more', min_precision);
        IF thr IS NULL THEN
            thr := 'Infinity'; how := format('no cut reaches an expected precision of %s', min_precision);
        END IF;
    ELSE
        thr := 0.5; how := 'probability of a match 0.5';
    END IF;
    CREATE TEMP TABLE tributary_match_a ON COMMIT DROP AS
    SELECT a.lk, a.rk FROM tributary._match_accepted(self, thr, one_to_one) a;
    made := made || 'pg_temp.tributary_match_a'::regclass::oid;
    SELECT count(*), coalesce(avg(s.score), 1), coalesce(sum(s.score), 0) INTO n_acc, exp_prec, acc_sum
      FROM pg_temp.tributary_match_s s JOIN pg_temp.tributary_match_a a ON a.lk = s.lk AND a.rk = s.rk;
    -- The expected number of matches among the candidates (one to one, a row's candidates'
    -- probabilities add up to 1 at most: the EM's shares, and a labelled partner leaves the
    -- others at 0).
    SELECT coalesce(sum(s.score), 0) INTO est FROM pg_temp.tributary_match_s s;
    exp_rec := CASE WHEN est > 0 THEN acc_sum / est ELSE 1 END;

    -- 7. What it learned and decided: for tributary_match_explain() and the NOTICE. Per column:
    -- how it was compared and m and u over the agreement levels.
    SELECT jsonb_agg(jsonb_build_object(
               'column', columns[c.i], 'right_column', rcols[c.i],
               'compared_by', CASE WHEN emb[c.i] AND str[c.i] THEN 'embedding and string similarity'
                                   WHEN emb[c.i] THEN 'embedding' ELSE 'string similarity' END)
             || CASE WHEN fit_m IS NOT NULL THEN jsonb_build_object(
                    'm', (SELECT jsonb_agg(fit_m[(c.i - 1) * nlev + l] ORDER BY l) FROM generate_series(1, nlev) l),
                    'u', (SELECT jsonb_agg(fit_u[(c.i - 1) * nlev + l] ORDER BY l) FROM generate_series(1, nlev) l),
                    'agree_m', round((fit_m[(c.i - 1) * nlev + nlev - 1] + fit_m[(c.i - 1) * nlev + nlev])::numeric, 4),
                    'agree_u', round((fit_u[(c.i - 1) * nlev + nlev - 1] + fit_u[(c.i - 1) * nlev + nlev])::numeric, 4))
                  ELSE '{}'::jsonb END
             ORDER BY c.i)
      INTO col_info
      FROM generate_series(1, n) c(i);
    explanation := jsonb_build_object(
        'left_table', left_table::text, 'right_table', right_table::text,
        'rows', jsonb_build_array(n_left, n_right), 'k', k, 'candidate_pairs', n_cand,
        'candidate_recall', cand_recall,
        'model', 'Fellegi-Sunter, m, u and prior fitted by EM' || CASE WHEN one_to_one THEN ', one to one' ELSE '' END
                 || CASE WHEN labels IS NOT NULL THEN format(', with %s labelled pairs', n_lab) ELSE '' END,
        'labelled_pairs', CASE WHEN labels IS NOT NULL THEN n_lab END,
        'levels', CASE WHEN fit_bounds IS NOT NULL THEN
                      (SELECT jsonb_agg(CASE WHEN l = 1 THEN '< ' || fit_bounds[1]
                                             WHEN l = nlev THEN '>= ' || fit_bounds[nlev - 1]
                                             ELSE fit_bounds[l - 1] || '-' || fit_bounds[l] END ORDER BY l)
                         FROM generate_series(1, nlev) l) END,
        'prior', fit_prior,
        'rows_with_a_partner', CASE WHEN fit_partnered IS NOT NULL AND one_to_one THEN
                                   jsonb_build_array(round(fit_partnered[1]::numeric, 4), round(fit_partnered[2]::numeric, 4)) END,
        'iterations', fit_iter, 'converged', fit_conv,
        'estimated_matches', round(est::numeric, 1),
        'threshold', CASE WHEN thr = 'Infinity' THEN NULL ELSE round(thr::numeric, 6) END, 'how', how,
        'accepted', n_acc, 'expected_precision', round(exp_prec::numeric, 4), 'expected_recall', round(exp_rec::numeric, 4),
        'columns', col_info,
        'seconds', jsonb_build_object('embedding', round(t_embed::numeric, 2), 'candidates', round(t_cand::numeric, 2),
                                      'evidence_and_fit', round((extract(epoch FROM clock_timestamp() - t0) - t_embed - t_cand)::numeric, 2)));
    PERFORM tributary._match_remember(explanation);
    IF report THEN
        RAISE NOTICE 'tributary_match: % x % rows, % candidate pairs (k = %, candidate recall %); %; estimated matches %, threshold % (%), accepted %, expected precision %, expected recall %; per column P(agree | match) / P(agree | non-match): %; % s embedding, % s candidates, % s evidence and fit',
            n_left, n_right, n_cand, k, coalesce(cand_recall->>'recall', 'n/a'), explanation->>'model', round(est::numeric, 1),
            coalesce(round(thr::numeric, 4)::text, 'none'), how, n_acc, round(exp_prec::numeric, 4), round(exp_rec::numeric, 4),
            coalesce((SELECT string_agg(format('%s %s / %s', e->>'column', e->>'agree_m', e->>'agree_u'), ', ')
                        FROM jsonb_array_elements(col_info) e WHERE e ? 'agree_m'), 'none'),
            explanation->'seconds'->>'embedding', explanation->'seconds'->>'candidates', explanation->'seconds'->>'evidence_and_fit';
    END IF;

    -- 8. The pairs: accepted ones with their evidence per column, and (all_pairs) the others.
    RETURN QUERY
    WITH ev AS (
        SELECT f.lk, f.rk,
               jsonb_object_agg(columns[f.i], jsonb_build_object(
                   'similarity', round(f.es::numeric, 4),
                   'level', CASE WHEN fit_bounds IS NOT NULL AND f.es IS NOT NULL THEN width_bucket(f.es, fit_bounds) END,
                   'weight', round((CASE WHEN f.es IS NULL THEN 0
                                         WHEN fit_m IS NOT NULL THEN
                                             ln(fit_m[(f.i - 1) * nlev + width_bucket(f.es, fit_bounds) + 1]
                                                / fit_u[(f.i - 1) * nlev + width_bucket(f.es, fit_bounds) + 1])
                                         ELSE 0 END)::numeric, 3))
                   ORDER BY f.i) AS evidence
          FROM pg_temp.tributary_match_f f
          JOIN pg_temp.tributary_match_a a ON a.lk = f.lk AND a.rk = f.rk
         WHERE f.kind = 'c'
         GROUP BY f.lk, f.rk)
    SELECT s.lk, s.rk, s.score, a.lk IS NOT NULL, ev.evidence
      FROM pg_temp.tributary_match_s s
      LEFT JOIN pg_temp.tributary_match_a a ON a.lk = s.lk AND a.rk = s.rk
      LEFT JOIN ev ON ev.lk = s.lk AND ev.rk = s.rk
     WHERE all_pairs OR a.lk IS NOT NULL;

    PERFORM tributary._match_drop(made);
END $$;
