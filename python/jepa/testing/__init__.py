"""Tiny random-weight models of every kind, written from numpy through the converters' own specs and
the GGUF writer: for tests, benchmarks, the fuzz corpus and the docs' examples (no torch, no download)."""
