"""The names a fault-tolerant run is configured with, written once: the flags' choices, the
configuration's checks and the files that record a run all take them from here (a module
with no imports: the command line reads it without loading the wing)."""

CHECKPOINT_MODES = ("full", "incremental", "eventual")
EXACTLY_ONCE_SINKS = ("clocked", "transactional")
SINKS = (*EXACTLY_ONCE_SINKS, "discard")  # discard: the benchmarks' (nothing kept)
DURABILITIES = ("process", "machine")
INTERVAL = 1.0  # the checkpoint interval, seconds, unless one is given (the paper's)
