-- Predictors that learn: tributary_train (src/api/learn.rs) trains a model of a table's column
-- over features tributary builds itself (k-NN votes from an embedding, a TF-IDF lexical model,
-- the as-of label history of rows related through foreign keys, typed columns; crates/learn)
-- and stores it here; tributary_predict_column / tributary_predict apply it.
--
-- The catalog tributary._predictors holds the serialised model, which encodes the labels it was
-- trained on: nobody but the extension's own functions reads it. The view tributary.predictors
-- shows everything but the model to the predictor's owner (and members of that role) and to
-- roles that may read the label column. Written only by the Rust functions, as the extension's
-- owner, after they checked the caller: a name belongs to the role that trained it first; only
-- that role (or a member) retrains or drops it (42501).

CREATE TABLE tributary._predictors (
    name          text PRIMARY KEY,
    owner         regrole NOT NULL,           -- the role that trained it (dumped by name)
    tbl           regclass NOT NULL,          -- the table (dumped and restored by name)
    label         name NOT NULL,              -- the column predicted
    kind          text NOT NULL CHECK (kind IN ('category', 'number')),
    embedding     name,                       -- the vector/halfvec column of the k-NN votes, or NULL
    as_of         name,                       -- the time column, or NULL (leave-one-out)
    options       jsonb NOT NULL,             -- history, columns, algorithm, k as asked
    signature     jsonb NOT NULL,             -- every column read, with its type: [[table, column, type], ...]
    features      text[] NOT NULL,            -- the feature names, in the model's order
    algorithm     text NOT NULL,              -- 'gbdt' or 'logistic'
    classes       text[],                     -- categories: the classes known at training
    model         bytea NOT NULL,             -- crates/learn's Model::to_bytes
    metrics       jsonb NOT NULL,             -- what tributary_train returned
    training_rows bigint NOT NULL,
    trained_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    data_digest   text NOT NULL               -- FNV-1a over the training rows' keys, times and labels
);
REVOKE ALL ON tributary._predictors FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('tributary._predictors', '');

CREATE VIEW tributary.predictors WITH (security_barrier) AS
SELECT p.name, p.owner, p.tbl, p.label, p.kind, p.embedding, p.as_of, p.options, p.features,
       p.algorithm, p.classes, p.metrics, p.training_rows, p.trained_at, p.data_digest,
       pg_catalog.octet_length(p.model) AS model_bytes
  FROM tributary._predictors p
 WHERE pg_catalog.pg_has_role(CURRENT_USER, p.owner::oid, 'USAGE')
    OR (pg_catalog.to_regclass(p.tbl::oid::pg_catalog.regclass::pg_catalog.text) IS NOT NULL
        AND pg_catalog.has_column_privilege(p.tbl::oid, p.label, 'SELECT'));
GRANT SELECT ON tributary.predictors TO PUBLIC;

-- The type of column `col` of `rel` as format_type() writes it, and its type category
-- (pg_type.typcategory), or NULLs.
CREATE FUNCTION tributary._learn_column_type(rel regclass, col name, OUT sql_type text, OUT category "char", OUT typname name)
RETURNS record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format_type(a.atttypid, a.atttypmod), t.typcategory, t.typname
      FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- A float8 expression of value `v` (an expression of type category `category`, type `typname`):
-- numbers as they are, booleans 0/1, dates as days since 1970-01-01, timestamps as days (with
-- fractions) since the epoch; NULL for other types.
CREATE FUNCTION tributary._learn_number(v text, category "char", typname name) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN category = 'N' AND typname NOT IN ('oid', 'regclass', 'regproc', 'regtype', 'money')
            THEN format('CAST(%s AS pg_catalog.float8)', v)
        WHEN category = 'B' THEN format('CAST(CAST(%s AS pg_catalog.int4) AS pg_catalog.float8)', v)
        WHEN typname = 'date' THEN format('CAST(%s OPERATOR(pg_catalog.-) CAST(''1970-01-01'' AS pg_catalog.date) AS pg_catalog.float8)', v)
        WHEN typname IN ('timestamp', 'timestamptz')
            THEN format('(pg_catalog.date_part(''epoch'', %s) OPERATOR(pg_catalog./) CAST(86400 AS pg_catalog.float8))', v)
    END
$$;

-- A text expression of the key columns `cols` of alias `alias` (one column: its text; several:
-- the row constructor's text), NULL when any of them is NULL.
CREATE FUNCTION tributary._learn_key_text(alias text, cols name[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN cardinality(cols) = 1 THEN format('CAST(%I.%I AS pg_catalog.text)', alias, cols[1])
           ELSE format('CASE WHEN pg_catalog.num_nulls(%s) = 0 THEN CAST(ROW(%s) AS pg_catalog.text) END',
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

-- The plan of a predictor over column `label` of `tbl`: what tributary_train and the
-- prediction functions read, as jsonb (src/service/learn.rs reads it):
--   kind            'category' or 'number' (tributary.label_kind)
--   rows_sql        one row per row of the table: key (jsonb text), tableoid, ctid, as_of
--                   (float8), label (text or float8), text, embedding (float4[]), numbers
--                   (float8[]), categories (text[]), the group of each parent path (text[]), the
--                   referenced key of each link path (text[]); %SOURCE% and %CTID% are replaced
--                   by the caller (the table; or one record)
--   numbers, categories  the names of the typed features in rows_sql's arrays
--   parents         the names of the parent, two- and three-hop paths, in the order of rows_sql's
--                   groups
--   links           [{name, ref, sql}]: sql gives (referenced key text, group text) pairs of one
--                   link path, ref = the index into rows_sql's referenced keys
--   as_of_sql       a statement that turns $1 (text) into the as_of float8, for split_at
--   signature       [[table, column, type], ...] of every column read
--   paths, columns  every history path and feature column found (chosen or not)
--   paths_used, columns_used  those chosen (what tributary_train stores as the predictor's
--                   history and columns, so that columns added later change nothing)
-- Paths (README, "Models that learn"): a foreign key of tbl, named by its columns
-- ("album_id": rows with the same parent); through the parent's own foreign keys ("album_id.artist_id":
-- rows whose parents share a grandparent); through the grandparent's ("track_id.album_id.artist_id":
-- rows whose grandparents share a great-grandparent); a link table referencing tbl and another
-- table ("film_person.person_id": rows linked to the same person); a link table referencing a
-- parent and another table ("track_id.playlist_track.playlist_id": rows whose parents share a
-- playlist). Typed columns: tbl's own numbers,
-- booleans, dates and timestamps, and text columns of at most 64 values in a sample of 10,000
-- rows (categories); a column without a value in that sample is none (an empty target column); the numbers of each parent ("album_id.price"). Text: tbl's own text
-- columns, its parents' ("track_id.name") and its grandparents' ("track_id.album_id.title"),
-- chosen by `columns` too. Only columns the caller may read are found; named ones it may not read fail when read
-- (42501). Errors: 42703 unknown label, as_of or embedding column; 42804 as_of not a number,
-- date or timestamp, embedding not vector/halfvec; 22023 a history path or column named that
-- does not exist (DETAIL lists those found).
-- Whether the caller may read every one of `cols` of `rel` (a path or join is used only then:
-- training reads what it finds with the caller's rights, and an unreadable column is a 42501).
CREATE FUNCTION tributary._learn_readable(rel regclass, cols name[])
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(cols) c
                        WHERE NOT pg_catalog.has_column_privilege(rel, c, 'SELECT'))
$$;

CREATE FUNCTION tributary._learn_spec(
    tbl regclass, label name, embedding name, as_of name, history text[], columns text[])
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vec text := tributary._vector_schema();
    kind text := tributary.label_kind(tbl, label, 'auto');
    ty record;
    a record;
    fk record;
    fk2 record;
    fk3 record;
    lk record;
    key_expr text := tributary.row_key(tbl, 't');
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
    key_cols name[];
    pname text;
    n bigint;
    pn text[];
    pnn text[];
    ptx text[];
    emb_expr text := 'CAST(NULL AS pg_catalog.float4[])';
    ridx integer;
BEGIN
    -- Columns in a primary or foreign key: never typed features (an id is no quantity).
    SELECT coalesce(array_agg(DISTINCT att.attname), '{}') INTO key_cols
      FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) k(n)
      JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = k.n
     WHERE c.conrelid = tbl AND c.contype IN ('p', 'f', 'u');
    sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, label, (tributary._learn_column_type(tbl, label)).sql_type));

    IF as_of IS NOT NULL THEN
        ty := tributary._learn_column_type(tbl, as_of);
        IF ty.sql_type IS NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" does not exist', as_of, tbl USING ERRCODE = '42703';
        END IF;
        as_of_expr := tributary._learn_number(format('t.%I', as_of), ty.category, ty.typname);
        IF as_of_expr IS NULL OR ty.category = 'B' THEN
            RAISE EXCEPTION 'as_of column "%" is of type %, not a number, date or timestamp', as_of, ty.sql_type
                USING ERRCODE = '42804', HINT = 'as_of names the column that dates each row: an integer (a year), a date or a timestamp.';
        END IF;
        as_of_sql := format('SELECT %s FROM (SELECT CAST($1 AS %s) AS %I) t', as_of_expr, ty.sql_type, as_of);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, as_of, ty.sql_type));
    END IF;

    IF embedding IS NOT NULL THEN
        PERFORM tributary.embedding_type(tbl, embedding);
        emb_expr := format('CAST(CAST(t.%I AS %s.vector) AS pg_catalog.float4[])', embedding, vec);
        sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, embedding, (tributary._learn_column_type(tbl, embedding)).sql_type));
    END IF;

    -- Own columns.
    FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
               FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
              WHERE att.attrelid = tbl AND att.attnum > 0 AND NOT att.attisdropped
                AND att.attname NOT IN (label, coalesce(embedding, ''), coalesce(as_of, ''))
                AND NOT att.attname = ANY (key_cols)
                AND has_column_privilege(tbl, att.attnum, 'SELECT')
              ORDER BY att.attnum LOOP
        IF a.typname IN ('vector', 'halfvec', 'sparsevec', 'bytea', 'tsvector', 'json', 'jsonb') THEN
            CONTINUE;
        END IF;
        -- Values in a sample of 10,000 rows (distinct, NULL not counted): an empty column (a
        -- target made for the predictions, say) is no feature.
        EXECUTE format('SELECT count(d.v) FROM (SELECT DISTINCT s.v FROM (SELECT t.%I AS v FROM %s t LIMIT 10000) s) d',
                       a.attname, tbl) INTO n;
        IF n = 0 THEN
            CONTINUE;
        END IF;
        IF tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) IS NOT NULL THEN
            found_cols := found_cols || a.attname::text;
            IF tributary._learn_chosen(a.attname, columns) THEN
                nums := nums || ('ARRAY[' || tributary._learn_number(format('t.%I', a.attname), a.typcategory, a.typname) || ']');
                num_names := num_names || a.attname::text;
                used_cols := used_cols || a.attname::text;
                sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            END IF;
        ELSIF a.typcategory IN ('S', 'E') THEN
            found_cols := found_cols || a.attname::text;
            IF NOT tributary._learn_chosen(a.attname, columns) THEN
                CONTINUE;
            END IF;
            texts := texts || format('CAST(t.%I AS pg_catalog.text)', a.attname);
            used_cols := used_cols || a.attname::text;
            sig := sig || jsonb_build_array(jsonb_build_array(tbl::text, a.attname, a.sql_type));
            IF n <= 64 THEN
                cats := cats || format('CAST(t.%I AS pg_catalog.text)', a.attname);
                cat_names := cat_names || a.attname::text;
            END IF;
        END IF;
    END LOOP;

    -- Parents: the group of each foreign key, each parent's numbers, and two and three hops;
    -- each only where the caller may read the columns it joins on.
    FOR fk IN SELECT * FROM tributary._learn_fkeys(tbl) LOOP
        IF NOT tributary._learn_readable(tbl, fk.cols) THEN
            CONTINUE;
        END IF;
        pname := array_to_string(fk.cols, ',');
        found_paths := found_paths || pname;
        IF tributary._learn_chosen(pname, history) THEN
            groups := groups || tributary._learn_key_text('t', fk.cols);
            group_names := group_names || pname;
            used_paths := used_paths || pname;
        END IF;
        IF NOT tributary._learn_readable(fk.ref, fk.ref_cols) THEN
            CONTINUE;
        END IF;
        -- The parent's numbers, as one float8[] subquery per parent.
        pn := '{}';
        pnn := '{}';
        ptx := '{}';
        FOR a IN SELECT att.attname, t.typcategory, t.typname, format_type(att.atttypid, att.atttypmod) AS sql_type
                   FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                  WHERE att.attrelid = fk.ref AND att.attnum > 0 AND NOT att.attisdropped
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk.ref
                                       AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                    AND has_column_privilege(fk.ref, att.attnum, 'SELECT')
                  ORDER BY att.attnum LOOP
            IF a.typcategory IN ('S', 'E') THEN
                -- The parent's text (an album's title, a track's composer) joins the row's text.
                found_cols := found_cols || (pname || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(p.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
                END IF;
                CONTINUE;
            END IF;
            IF tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname) IS NULL
               OR a.typname IN ('vector', 'halfvec') THEN
                CONTINUE;
            END IF;
            found_cols := found_cols || (pname || '.' || a.attname);
            IF tributary._learn_chosen(pname || '.' || a.attname, columns) THEN
                pn := pn || tributary._learn_number(format('p.%I', a.attname), a.typcategory, a.typname);
                pnn := pnn || (pname || '.' || a.attname);
                used_cols := used_cols || (pname || '.' || a.attname);
                sig := sig || jsonb_build_array(jsonb_build_array(fk.ref::text, a.attname, a.sql_type));
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
            found_paths := found_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ','), history) THEN
                groups := groups || format('(SELECT %s FROM %s p WHERE (%s) = (%s))',
                    tributary._learn_key_text('p', fk2.cols), fk.ref,
                    (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                    (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                group_names := group_names || (pname || '.' || array_to_string(fk2.cols, ','));
                used_paths := used_paths || (pname || '.' || array_to_string(fk2.cols, ','));
            END IF;
            -- Three hops: rows whose grandparents share a great-grandparent (a track's album's
            -- artist: "track_id.album_id.artist_id").
            FOR fk3 IN SELECT * FROM tributary._learn_fkeys(fk2.ref) LOOP
                -- Only a path the caller may read (the grandparent's key and foreign key columns).
                IF NOT tributary._learn_readable(fk2.ref, fk2.ref_cols || fk3.cols) THEN
                    CONTINUE;
                END IF;
                found_paths := found_paths || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','), history) THEN
                    groups := groups || format('(SELECT %s FROM %s p JOIN %s g ON (%s) = (%s) WHERE (%s) = (%s))',
                        tributary._learn_key_text('g', fk3.cols), fk.ref, fk2.ref,
                        (SELECT string_agg(format('g.%I', c), ', ' ORDER BY o) FROM unnest(fk2.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk2.cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('p.%I', c), ', ' ORDER BY o) FROM unnest(fk.ref_cols) WITH ORDINALITY u(c, o)),
                        (SELECT string_agg(format('t.%I', c), ', ' ORDER BY o) FROM unnest(fk.cols) WITH ORDINALITY u(c, o)));
                    group_names := group_names || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                    used_paths := used_paths || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || array_to_string(fk3.cols, ','));
                END IF;
            END LOOP;
            -- The grandparent's text (a track's album title) joins the row's text too.
            ptx := '{}';
            FOR a IN SELECT att.attname, format_type(att.atttypid, att.atttypmod) AS sql_type
                       FROM pg_attribute att JOIN pg_type t ON t.oid = att.atttypid
                      WHERE att.attrelid = fk2.ref AND att.attnum > 0 AND NOT att.attisdropped
                        AND tributary._learn_readable(fk2.ref, fk2.ref_cols)
                        AND t.typcategory IN ('S', 'E')
                        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = fk2.ref
                                           AND c.contype IN ('p', 'f', 'u') AND att.attnum = ANY (c.conkey))
                        AND has_column_privilege(fk2.ref, att.attnum, 'SELECT')
                      ORDER BY att.attnum LOOP
                found_cols := found_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                IF tributary._learn_chosen(pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname, columns) THEN
                    ptx := ptx || format('CAST(g.%I AS pg_catalog.text)', a.attname);
                    used_cols := used_cols || (pname || '.' || array_to_string(fk2.cols, ',') || '.' || a.attname);
                    sig := sig || jsonb_build_array(jsonb_build_array(fk2.ref::text, a.attname, a.sql_type));
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
            links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
                'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                              tributary._learn_key_text('l', lk.other_cols), lk.child));
            sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
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
        links := links || jsonb_build_object('name', pname, 'ref', ridx - 1,
            'sql', format('SELECT %s, %s FROM %s l', tributary._learn_key_text('l', lk.cols),
                          tributary._learn_key_text('l', lk.other_cols), lk.child));
        sig := sig || jsonb_build_array(jsonb_build_array(lk.child::text, array_to_string(lk.cols, ','), 'link'));
    END LOOP;

    -- Names asked for that do not exist.
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(history) h
     WHERE ltrim(h, '-') <> ALL (found_paths);
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'history path % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The paths found: %s.', coalesce(nullif(array_to_string(found_paths, ', '), ''), 'none')),
            HINT = 'Paths are named by the foreign key columns they follow (see tributary_train''s documentation).';
    END IF;
    SELECT string_agg(quote_literal(h), ', ') INTO pname FROM unnest(columns) h
     WHERE ltrim(h, '-') <> ALL (found_cols);
    IF pname IS NOT NULL THEN
        RAISE EXCEPTION 'feature column % of relation "%" does not exist', pname, tbl USING ERRCODE = '22023',
            DETAIL = format('The typed columns found: %s.', coalesce(nullif(array_to_string(found_cols, ', '), ''), 'none')),
            HINT = 'Columns of numbers, dates, booleans and categories of up to 64 values that the caller may read are features.';
    END IF;

    RETURN jsonb_build_object(
        'kind', kind,
        'rows_sql', format('SELECT CAST(%s AS pg_catalog.text), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM %%SOURCE%% t',
            key_expr, '%TABLEOID%', '%CTID%', as_of_expr,
            CASE kind WHEN 'number' THEN format('CAST(t.%I AS pg_catalog.float8)', label)
                      ELSE format('CAST(t.%I AS pg_catalog.text)', label) END,
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
                 ELSE format('ARRAY[%s]', array_to_string(refs, ', ')) END),
        'numbers', to_jsonb(num_names),
        'categories', to_jsonb(cat_names),
        'parents', to_jsonb(group_names),
        'links', links,
        'as_of_sql', as_of_sql,
        'signature', sig,
        'paths', to_jsonb(found_paths),
        'columns', to_jsonb(found_cols),
        'columns_used', to_jsonb(used_cols),
        'paths_used', to_jsonb(used_paths));
END $$;

ALTER FUNCTION _predict_record(text, jsonb) SET SCHEMA tributary;

-- tributary_predict(predictor text, row [, ...]) → (prediction, confidence, evidence): one row's
-- prediction by a trained predictor (tributary_train), its features as of the row's own as_of.
-- `row` is a row of the predictor's table (a whole-row reference, or ROW(...)::tbl for a row not
-- in the table). See tributary._predict_record (src/api/learn.rs) for the evidence and errors.
-- NULL row gives NULLs.
CREATE FUNCTION tributary_predict(predictor text, "row" anyelement,
    OUT prediction text, OUT confidence float8, OUT evidence jsonb)
RETURNS record LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.prediction, r.confidence, r.evidence
      FROM tributary._predict_record(predictor, pg_catalog.to_jsonb("row")) r
$$;

COMMENT ON TABLE tributary._predictors IS 'Trained predictors (tributary_train): the serialised models and what they were trained on; read only through tributary''s functions.';
COMMENT ON VIEW tributary.predictors IS 'Trained predictors visible to the current role (owner, member of the owner, or allowed to read the label column): options, features, metrics, no model.';
COMMENT ON FUNCTION tributary._learn_column_type(regclass, name) IS 'Internal: a column''s format_type, type category and type name.';
COMMENT ON FUNCTION tributary._learn_number(text, "char", name) IS 'Internal: a float8 expression of a number, boolean, date or timestamp expression.';
COMMENT ON FUNCTION tributary._learn_key_text(text, name[]) IS 'Internal: a text expression of key columns (NULL when one is NULL).';
COMMENT ON FUNCTION tributary._learn_fkeys(regclass) IS 'Internal: the foreign keys of a table with their columns.';
COMMENT ON FUNCTION tributary._learn_chosen(text, text[]) IS 'Internal: whether a name is chosen by a list of names or -exclusions (NULL: all).';
COMMENT ON FUNCTION tributary._learn_readable(regclass, name[]) IS 'Internal: whether the caller may read every one of these columns of the relation.';
COMMENT ON FUNCTION tributary._learn_spec(regclass, name, name, name, text[], text[]) IS 'Internal: the features of a predictor: the rows query, history paths, typed columns and the columns read.';
COMMENT ON FUNCTION tributary._predict_record(text, jsonb) IS 'Internal: one row''s prediction by a predictor (behind tributary_predict(predictor, row)).';
COMMENT ON FUNCTION tributary_predict(text, anyelement) IS 'One row''s prediction by a trained predictor, its features as of the row''s time, with evidence.';
COMMENT ON FUNCTION tributary_train(text, regclass, name, name, name, text, text[], text[], text, integer) IS 'Trains a predictor of a column over k-NN votes, a TF-IDF model, the as-of label history through foreign keys and typed columns; returns its metrics next to k-NN and the majority baseline.';
COMMENT ON FUNCTION tributary_predict_column(text, name, integer) IS 'Fills a column with a trained predictor''s predictions for the rows whose label is NULL.';
COMMENT ON FUNCTION tributary_drop_predictor(text) IS 'Drops a trained predictor (its owner only).';
