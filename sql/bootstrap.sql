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
    pooling        text NOT NULL CHECK (pooling IN ('mean', 'cls')),
    precision      text NOT NULL DEFAULT 'fp32' CHECK (precision IN ('fp32', 'fp16', 'int8')),
    sha256         text,                           -- of onnx_file, from tributary.json
    registered_at  timestamptz NOT NULL DEFAULT now()
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
