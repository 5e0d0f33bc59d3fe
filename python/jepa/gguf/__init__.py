"""The jepa GGUF format (schema v1): its metadata keys (keys.py) and tensors (tensors.py), declared
once; what each part of a file hands the writer (schema.py, text_schema.py); the writer (writer.py);
the bounded header reader (header.py); docs/gguf.md's tables (schema_doc.py).

`import jepa` imports none of it; writer.py alone needs the `gguf` package (the convert extra)."""
