"""Task sizes under a state memory budget (Darwin, :mod:`scabbard.engine.spill`): a task's
partials are what a run under a budget holds besides its window state, so a budget bounds
them too (:func:`task_rows`, used by ``Engine.run_batch_rows``)."""

from __future__ import annotations

TASK_ROW_BYTES = 64  # what a task's input row can cost while its fragment runs (its partial)
# the smallest batch under a budget (below the engine's MIN_BATCH): a task's partials, one per
# key at most, are split, waited and written per partition, and at many keys smaller tasks
# keep the fragment's table in cache and half as much in flight (DARWIN, 1 M keys, 16 MiB:
# 4.3-5.0 M tuples/s at 2^17 rows, 3.5-4.3 at 2^18, the later engine; 64 MiB: 4.4 against
# 3.6).  The price is paid where the state fits the budget: at 10 k keys a task's partials
# are one per key whatever its size, so halving it doubles the rows assembled (27 against
# 40 M tuples/s)
SPILL_MIN_BATCH = 1 << 17
# a sample's keys are taken as all the keys when its second half adds fewer new keys than
# this fraction of its first half's
SATURATED = 0.1
# what an input row of a running task costs besides its partial: the fragment's per-row
# arrays (DARWIN at 10 k keys within 16 MiB, peak anonymous MB against rows a task: 128 at
# 2^17, 132 at 2^18, 145 at 2^19, 171 at 2^20, 309 at 2^22 - about 45 bytes a row of one
# task's size, over both workers)
FRAGMENT_ROW_BYTES = 32


def task_rows(budget: int, want: int, keys: tuple[int, int] | None,
              rows_per_pane: float) -> int:
    """A task's rows under a state ``budget`` (a branch's share), at most ``want`` (the
    size its windows ask for): small enough that the partials of the tasks in flight (8 of
    them, :data:`TASK_ROW_BYTES` a partial; a run under a budget keeps a task a worker and
    one more) are a small part of the budget.

    A partial per input row at most - unless ``keys`` (the distinct keys of the first half
    of a sample of the stream, and of all of it) shows them saturating: then a task holds
    that many partials a pane whatever its rows, over the panes it spans (``rows_per_pane``:
    input rows a pane), and may be larger while those fit, and while a task's own per-row
    arrays (:data:`FRAGMENT_ROW_BYTES` a row) fit the budget too.  DARWIN at 10 k keys
    within 16 MiB: 2^19-row tasks, 36-40 M tuples/s where 2^17 gave 13 (2^22, the windows'
    size in memory: 64 M tuples/s, and 180 MB more); at 1 M keys every row of a 2^16-row
    sample is a key of its own, and the tasks stay at 2^17."""
    most = budget // (8 * TASK_ROW_BYTES)  # one partial per row
    if keys is not None:
        half, whole = keys
        if 0 < whole <= (1 + SATURATED) * half:
            panes = budget / (8 * TASK_ROW_BYTES * whole)  # a task's panes that fit
            most = max(most, min(int((panes - 1) * rows_per_pane),
                                 budget // FRAGMENT_ROW_BYTES))
    return int(min(want, max(SPILL_MIN_BATCH, most)))
