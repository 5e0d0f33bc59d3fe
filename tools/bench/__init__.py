"""The benchmarks' one harness (tools/bench/): what every benchmark shares is written here once."""
