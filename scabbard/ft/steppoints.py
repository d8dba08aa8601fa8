"""Eventual checkpoints' resume points: a recovery that starts after the last record.

CEC (the seed) checkpoints each window's state on its own time and recovers each from its own
checkpoint, replaying only the input after it.  Here a record is still the cut the run's
other state (joins, persisted channels, a transactional sink's epochs) resumes from, but where
the window is the only state (:func:`applies`) an eventual step is a point to resume from
too: after saving the panes closed since the last save (if any: a tumbling window has none,
its open pane is its state), the step appends the open pane's partials
(:meth:`~scabbard.ft.panes.PaneLog.write_open`, metadata ``(clock, pane, rows, seq,
last_ts, emitted)``) - with the closed panes already in pane units, that is the window's whole
state after task ``seq``, whose input ended at ``clock``; the step comes once the task's
results were handed to the sink, ``emitted`` the last window end they reached.  No marker
and no sink take part.

A recovery (:func:`newest`) has loaded the newest usable record; it reads the window's state
stream after everything the record lists - what the steps wrote since, CEC's *extent* - and
takes the newest step whose open part is whole, that is later than the record, and whose
results are all in the clocked sink: it holds every window up to ``emitted`` (``committed
window_end >= emitted``), or a batch of a later task (``committed input_end > clock``:
results are written in task order).  The state is then every pane the open windows need,
each from the newest pane unit before the open part that holds it - one the steps wrote, else
one the record lists, as loaded (a pane closed by the record's cut is in its units; one
closed since, in a step's; a unit holds whole panes, and units of a crashed run or of an
unfinished record hold the same panes' same partials) - and the open part.  What it reads
grows with the steps since the record, not with the window.  The input is replayed from
``clock``, not from the record's cut: the more often steps come (CI; Q forces them), the
less a recovery replays.  Anything not whole or not verified - a torn open part, a damaged
unit, a sink behind the step - leaves the record as the point to resume from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from scabbard.engine.tasks import Edges, columns_edges, edges_columns
from scabbard.ft.panes import OPEN_WORDS, UNIT_WORDS
from scabbard.pog.checkpoint import CheckpointRecord
from scabbard.storage import StorageError

log = logging.getLogger(__name__)


@dataclass
class Point:
    """A step to resume from: after task ``seq``, the input ended at ``input_end``."""

    input_end: int
    seq: int
    last_ts: int
    edges: Edges  # the pane partials the open windows need, the open pane's last
    runs: list  # the pane units' rows it took, as a record lists them (PaneLog.restore)
    panes: list  # each run's pane column
    units: int  # pane units it took panes from


@dataclass
class Extent:
    """What a recovery read of the window's state stream to find the step - all of it after
    what its record lists (CEC's *extent*, which its EC-load reads): rows and bytes of pane
    units and open parts, and the steps' open parts among them."""

    rows: int = 0
    nbytes: int = 0
    opens: int = 0


def applies(state, persist_input: bool, sink) -> bool:
    """Whether this run's eventual steps are points to resume from: one window operator in
    memory is the query's only state, the input is persisted, and the sink is the clocked
    one (its stored results say which tasks' results are all in)."""
    from scabbard.ft.sinks import ClockedSink

    return (state.mode == "eventual" and persist_input and isinstance(sink, ClockedSink)
            and len(state.windows) == 1 and not state.spilled and not state.joins
            and not state.channels)


@dataclass
class _Open:
    clock: int
    pane: int
    rows: int
    seq: int
    last_ts: int
    emitted: int
    first: int  # its first offset
    cols: list


def newest(state, rec: CheckpointRecord, loaded: Edges, committed: dict,
           stored_end: int) -> tuple[Point | None, Extent]:
    """The newest usable step after ``rec`` (see the module), or None, and the extent read
    to find it; ``loaded``: the window's partials as ``rec`` lists them (its pane units'
    rows, then its open panes'), ``committed``: the sink's clock, ``stored_end``: where the
    stored input ends."""
    w = state.windows[0]
    name = w.log.schema.name
    listed = [p for p in rec.state if p["stream"] == name]
    extent = Extent()
    if not listed:
        return None, extent
    after = max(int(p["end"]) for p in listed)  # what the steps after the record wrote
    try:
        units, opens = _scan(state.bm, w.log.sid, after, extent)
    except (StorageError, FileNotFoundError, ValueError) as e:
        log.warning("the eventual steps after checkpoint %d are not usable (%s)", rec.id, e)
        return None, extent
    ok = [o for o in opens if rec.input_end < o.clock <= stored_end
          and (o.emitted <= committed["window_end"] or o.clock < committed["input_end"])
          and sum(len(c[0]) for c in o.cols) == o.rows]
    if not ok:
        return None, extent
    best = max(ok, key=lambda o: (o.clock, o.first))
    return _point(w.branch, name, {**_listed_units(listed, loaded), **units}, best), extent


def _listed_units(listed: list[dict], loaded: Edges) -> dict:
    """The record's pane units as :func:`_scan` gives units: each listed run of one (keyed
    by its first offset: below every unit written after the record) with its rows as
    loaded."""
    cols, at, out = edges_columns(loaded), 0, {}
    for p in listed:
        n = int(p["end"]) - int(p["first"])
        if "panes" in p and n:
            out[int(p["first"])] = [(int(p["first"]), tuple(c[at:at + n] for c in cols))]
        at += n
    return out


def _scan(bm, sid: int, floor: int, extent: Extent) -> tuple[dict, list[_Open]]:
    """The stream from ``floor``: pane units' segments by unit, and the open parts (what it
    read added to ``extent``)."""
    units: dict[int, list] = {}
    opens: list[_Open] = []
    for batch, meta in bm.load_bulk(sid, floor, None, with_meta=True):  # a few reads
        extent.rows += len(batch)
        extent.nbytes += sum(c.nbytes for c in batch.columns)
        words = np.asarray(meta, np.uint64).view(np.int64)
        if len(words) == UNIT_WORDS:
            units.setdefault(int(words[3]), []).append((batch.offset, batch.columns))
        elif len(words) == OPEN_WORDS:
            clock, pane, rows, seq, last_ts, emitted = (int(x) for x in words)
            o = opens[-1] if opens else None
            if o is not None and (o.clock, o.pane, o.seq) == (clock, pane, seq) \
                    and sum(len(c[0]) for c in o.cols) < o.rows:
                o.cols.append(batch.columns)
            else:
                opens.append(_Open(clock, pane, rows, seq, last_ts, emitted, batch.offset,
                                   [batch.columns]))
    extent.opens = len(opens)
    return units, opens


def _point(branch, name: str, units: dict, o: _Open) -> Point:
    """The window's state at the open part ``o``: each pane its open windows need from the
    newest unit before ``o`` that holds it, then ``o``'s rows."""
    lo, hi = o.pane - branch.panes + 1, o.pane
    taken: dict[int, int] = {}  # pane -> the unit it is taken from
    cols_of: dict[int, tuple] = {}
    for uid in sorted((u for u in units if u < o.first), reverse=True):
        segs = units[uid]
        cols = [np.concatenate(c) for c in zip(*(s[1] for s in segs), strict=True)]
        offs = np.concatenate([s[0] + np.arange(len(s[1][0]), dtype=np.int64) for s in segs])
        pane = cols[0]
        want = np.unique(pane[(pane >= lo) & (pane < hi)])
        mine = [int(p) for p in want if int(p) not in taken]
        if mine:
            taken.update(dict.fromkeys(mine, uid))
            cols_of[uid] = (cols, offs, np.isin(pane, mine))
    runs = []  # (run, its pane column, its columns): a unit's kept rows, cut where not adjacent
    for uid in sorted(cols_of):
        cols, offs, keep = cols_of[uid]
        rows = np.flatnonzero(keep)
        breaks = np.flatnonzero(np.diff(offs[rows]) != 1) + 1
        for part in np.split(rows, breaks):
            pane = cols[0][part]
            runs.append(({"stream": name, "first": int(offs[part[0]]),
                          "end": int(offs[part[-1]]) + 1,
                          "panes": [int(pane[0]), int(pane[-1]) + 1]},
                         pane, [c[part] for c in cols]))
    runs.sort(key=lambda r: r[0]["panes"][0])  # each pane in one run: the runs in pane order
    opened = [np.concatenate(c) for c in zip(*o.cols, strict=True)]
    cat = [np.concatenate(c) for c in zip(*[r[2] for r in runs], opened, strict=True)]
    return Point(o.clock, o.seq, o.last_ts, columns_edges(branch, cat), [r[0] for r in runs],
                 [r[1] for r in runs], len(cols_of))
