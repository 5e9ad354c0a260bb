-- Registering prepared models: the default model's directory under other names, in fp32 and fp16.
SELECT tributary_register_model('minilm-copy', 'all-MiniLM-L6-v2');
SELECT tributary_register_model('minilm-fp16', 'all-MiniLM-L6-v2', 'fp16');
SELECT name, path, onnx_file, tokenizer_file, dimension, max_length, pooling, precision, length(sha256) AS sha_len
FROM tributary.models ORDER BY name;
-- The copy gives the same vectors; fp16 (the GPU variant, here on the CPU) gives nearly the same.
SELECT tributary_embed('same model, other name', 'minilm-copy') <=> tributary_embed('same model, other name') < 1e-6 AS same;
SELECT round((1 - (tributary_embed('half precision weights', 'minilm-fp16') <=> tributary_embed('half precision weights')))::numeric, 3) AS fp16_cosine;
SELECT model, precision, execution_provider FROM tributary_info('minilm-fp16');
-- Re-registering replaces the entry; an unknown precision is refused.
SELECT tributary_register_model('minilm-copy', 'all-MiniLM-L6-v2', 'fp32');
SELECT count(*) AS copies FROM tributary.models WHERE name = 'minilm-copy';
SELECT expect_error($$SELECT tributary_register_model('minilm-int4', 'all-MiniLM-L6-v2', 'int4')$$);
SELECT expect_error($$SELECT tributary_register_model('minilm-tok', 'all-MiniLM-L6-v2', 'tokenizer')$$);
SELECT tributary_drop_model('minilm-copy');
SELECT tributary_drop_model('minilm-fp16');
SELECT expect_error($$SELECT tributary_embed('gone', 'minilm-copy')$$);
SELECT name FROM tributary.models;
