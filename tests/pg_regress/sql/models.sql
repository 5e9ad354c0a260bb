-- Registering prepared models: the default model's directory under other names, in fp32 and fp16.
SELECT tributary_register_model('minilm-copy', 'all-MiniLM-L6-v2');
SELECT tributary_register_model('minilm-fp16', 'all-MiniLM-L6-v2', 'fp16');
SELECT name, path, onnx_file, tokenizer_file, dimension, max_length, pooling, precision, length(sha256) AS sha_len
FROM tributary.models ORDER BY name;
-- The copy gives the same vectors; fp16 (the GPU variant, here on the CPU) gives nearly the same.
SELECT tributary_embed('same model, other name', 'minilm-copy') <=> tributary_embed('same model, other name') < 1e-6 AS same;
SELECT round((1 - (tributary_embed('half precision weights', 'minilm-fp16') <=> tributary_embed('half precision weights')))::numeric, 3) AS fp16_cosine;
SELECT model, precision, execution_provider FROM tributary_info('minilm-fp16');
-- int8 (dynamically quantized, for CPUs): CREATE EXTENSION registers the default model's int8 graph;
-- registering it under another name works the same. Close to fp32 but not equal (the exact cosine
-- depends on the CPU's int8 kernels, so only a range is shown).
SELECT name, onnx_file, precision, length(sha256) AS sha_len FROM tributary.models WHERE precision = 'int8';
SELECT tributary_register_model('minilm-q', 'all-MiniLM-L6-v2', 'int8');
WITH v(t) AS (VALUES ('PostgreSQL database server'), ('a tool to read email'), ('fonts for Chinese text'))
SELECT t, 1 - (tributary_embed(t, 'minilm-q') <=> tributary_embed(t)) BETWEEN 0.95 AND 0.99999 AS close_not_equal,
       tributary_embed(t, 'minilm-q') = tributary_embed(t, 'all-MiniLM-L6-v2-int8') AS same_as_default_int8
FROM v;
SELECT model, precision, execution_provider FROM tributary_info('minilm-q');
SELECT tributary_drop_model('minilm-q');
-- Re-registering replaces the entry; an unknown precision is refused.
SELECT tributary_register_model('minilm-copy', 'all-MiniLM-L6-v2', 'fp32');
SELECT count(*) AS copies FROM tributary.models WHERE name = 'minilm-copy';
SELECT expect_error($$SELECT tributary_register_model('minilm-int4', 'all-MiniLM-L6-v2', 'int4')$$);
SELECT expect_error($$SELECT tributary_register_model('minilm-tok', 'all-MiniLM-L6-v2', 'tokenizer')$$);
SELECT tributary_drop_model('minilm-copy');
SELECT tributary_drop_model('minilm-fp16');
SELECT expect_error($$SELECT tributary_embed('gone', 'minilm-copy')$$);
SELECT name FROM tributary.models ORDER BY name;
