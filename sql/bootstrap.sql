-- The model catalog. Registering a model names files the server loads, so only superusers
-- write it (tributary_register_model checks); everyone may read it.
CREATE SCHEMA tributary;
GRANT USAGE ON SCHEMA tributary TO PUBLIC;

CREATE TABLE tributary.models (
    name           text PRIMARY KEY,
    path           text NOT NULL,                  -- model directory: absolute, or relative to tributary.model_path
    onnx_file      text NOT NULL DEFAULT 'model.onnx',
    tokenizer_file text NOT NULL DEFAULT 'tokenizer.json',
    dimension      integer NOT NULL CHECK (dimension BETWEEN 1 AND 16000),
    max_length     integer NOT NULL CHECK (max_length > 0),   -- tokens, special tokens included
    pooling        text NOT NULL CHECK (pooling IN ('mean', 'cls', 'lasttoken')),
    precision      text NOT NULL DEFAULT 'fp32' CHECK (precision IN ('fp32', 'fp16', 'int8')),
    sha256         text,                           -- of onnx_file, from tributary.json
    registered_at  timestamptz NOT NULL DEFAULT now(),
    -- 'tributary': pooling and normalisation inside the graph (export_model.py);
    -- 'sentence-transformers': a standard export, pooled (and normalised) by tributary.
    layout         text NOT NULL DEFAULT 'tributary' CHECK (layout IN ('tributary', 'sentence-transformers')),
    normalize      boolean NOT NULL DEFAULT true,
    prompts        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(prompts) = 'object'),  -- name -> text put before each input
    default_prompt text CHECK (default_prompt IS NULL OR prompts ? default_prompt)
);
REVOKE ALL ON tributary.models FROM PUBLIC;
GRANT SELECT ON tributary.models TO PUBLIC;

-- The default model, prepared by scripts/setup.sh into $sharedir/tributary/models, and its INT8
-- variant for CPUs (dynamically quantized by ort/scripts/export_model.py; about 1.5x the fp32
-- rows/s on AVX2 at mean cosine 0.994 to fp32, see BENCHMARKS.md).
INSERT INTO tributary.models (name, path, onnx_file, dimension, max_length, pooling, precision)
VALUES ('all-MiniLM-L6-v2', 'all-MiniLM-L6-v2', 'model.onnx', 384, 256, 'mean', 'fp32'),
       ('all-MiniLM-L6-v2-int8', 'all-MiniLM-L6-v2', 'model_int8.onnx', 384, 256, 'mean', 'int8');

-- Models registered later are user data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('tributary.models',
    'WHERE name NOT IN (''all-MiniLM-L6-v2'', ''all-MiniLM-L6-v2-int8'')');

-- The one check of a target (embedding) column, for tributary_embed_column
-- (src/service/column.rs), jobs (sql/jobs.sql) and prediction (sql/predict.sql): column `col`
-- of `rel` exists (42703), is pgvector's vector or halfvec (42804, with `hint`), and, when `dim`
-- is given, has no dimension or `dim` (22000, naming `model`). Returns the type's name, 'vector'
-- or 'halfvec'. `relname`: how messages name the relation (default: rel::text under the pinned
-- search_path, so schema-qualified outside pg_catalog and pg_temp). SECURITY INVOKER; like every
-- function of the extension it runs with search_path = pg_catalog, pg_temp.
CREATE FUNCTION tributary._target_column(
    rel regclass, col name, model text DEFAULT NULL, dim integer DEFAULT NULL, relname text DEFAULT NULL,
    hint text DEFAULT 'The target column must be of pgvector''s type vector(n) or halfvec(n).')
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    typ text;
    typmod integer;
BEGIN
    SELECT t.typname::text, a.atttypmod INTO typ, typmod
      FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', col, coalesce(relname, rel::text)
            USING ERRCODE = 'undefined_column';
    END IF;
    IF typ NOT IN ('vector', 'halfvec') THEN
        RAISE EXCEPTION 'column "%" is of type %, not vector or halfvec', col, typ
            USING ERRCODE = 'datatype_mismatch', HINT = hint;
    END IF;
    IF dim IS NOT NULL AND typmod > 0 AND typmod <> dim THEN
        RAISE EXCEPTION 'expected % dimensions, not %', typmod, dim USING ERRCODE = 'data_exception',
            DETAIL = format('column "%s" is %s(%s) but model "%s" produces %s dimensions', col, typ, typmod, model, dim);
    END IF;
    RETURN typ;
END $$;

-- pgvector's schema, quoted, for OPERATOR(schema.<=>) and schema.subvector(...) in dynamic SQL
-- that must not depend on the caller's search_path (tributary_predict, tributary_evaluate).
CREATE FUNCTION tributary._vector_schema() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector'
$$;
