"""Task runtime: sources, dispatcher, worker pool, assembly, sinks, metrics. DESIGN.md §5."""
