"""Answer quality with real models: does alignment, the order annotation, swap, superset or dedup change the
answers? ``python -m benchmarks.quality`` (docs/quality.md)."""
