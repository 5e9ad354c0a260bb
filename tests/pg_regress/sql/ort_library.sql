-- A missing ONNX Runtime library is a clear error whose HINT names the setting, and the backend
-- survives. This file runs in its own backend, before ONNX Runtime is loaded.
SET tributary.ort_library = '/nonexistent/libonnxruntime.so';
SELECT expect_error($$SELECT tributary_embed('x')$$);
SELECT 1 AS backend_alive;
-- A file that is not a shared library: the loader's reason is in DETAIL.
SET tributary.ort_library = '/etc/hostname';
SELECT expect_error($$SELECT tributary_embed('x')$$);
RESET tributary.ort_library;
SELECT vector_dims(tributary_embed('x')) AS dims_after_fix;
-- Once loaded, a process keeps its ONNX Runtime: another path is refused, not half-loaded.
SET tributary.ort_library = '/nonexistent/other.so';
SELECT expect_error($$SELECT tributary_embed('y')$$);
RESET tributary.ort_library;
SELECT vector_dims(tributary_embed('y')) AS dims_after_reset;
