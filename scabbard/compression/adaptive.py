"""Adaptive compression: profile, select, specialise, swap, deoptimise (paper §5.2, Fig. 12).

:class:`AdaptiveCompression` is a :class:`~scabbard.compression.policy.Compression`
that starts from the paper's default scheme and, while the query runs:

1. **profiles** every ``profile_every``-th batch before it is persisted
   (:mod:`scabbard.compression.profile`, one numba pass per column);
2. every ``interval`` seconds (paper: 4 s; the first time as soon as
   :data:`FIRST_DECISION` batches were profiled) **selects** a codec per column from the
   statistics since the last decision - with the paper's rules (:func:`by_rules`) or a
   cost model (:func:`by_cost`: encode time plus write time of the bytes at the disk
   bandwidth, measured by encoding the last profiled batch with each candidate);
3. **specialises** it with what was learned (a fixed bit width, a byte width, a
   dictionary bound) and **swaps** it in from the next batch on; the query never stops;
4. a batch that breaks the specialisation is encoded with the generic codec instead
   (**deoptimisation**, counted and logged by the base class); the next decision
   learns the new data and specialises again.

Segments record each column's codec, so batches written before, during and after a
swap or a fallback all decode - on recovery too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from scabbard import timers
from scabbard.compression.base import FLOAT, INTEGER, Codec, Unfit, codec_class
from scabbard.compression.policy import ADAPTIVE, Compression
from scabbard.compression.profile import ColumnProfile

SELECTORS = ("rules", "cost")
RLE_MIN_RUN = 5.0  # the paper's rule: RLE once ceil(avg run) - 1 >= 5 (LightSaber)
# steps are stored where they save a whole bit a value against the values' own width: a
# smaller saving is not worth delta-of-delta's CPU (3x null suppression's to encode: CM's
# category 2.75 bits against 3 cost its persisted ingest 20%) nor the specialised codec the
# values would get (with its headroom bit, never counted here)
STEP_SAVING_BITS = 1.0
TS_RLE_MIN_RUN = 16.0  # timestamps: their steps or the steps' changes unless bursts are long
# floats of fewer distinct values than this: a dictionary (their bits, exact) and codes of at
# most 12 bits, where XOR's leading and trailing zeros leave most of a value's bits (CM's cpu:
# 8 levels, 0.375 against 2.07 bytes per row)
FLOAT_DICTIONARY = 1 << 12
FLOAT_REPEATS = 16  # ... each seen this many times a batch on average (the values cost less)
# a profiled batch's statistics of runs, steps and distinct values come from its first rows
# (the range from all of it): profiling every row of every 4th batch cost 1.8-3.5 ns a
# value - under the scheme's lock, as much as the codecs themselves (CM1: 2.5 ns a tuple)
PROFILE_ROWS = 1 << 14
STEP_ROWS = 1 << 16  # the step codecs and XOR are measured on this many of the last batch's rows
# the first decision comes after this many profiled batches, not a whole interval: until then
# every column is in its default codec (SG1's readings spent the first 0.5 s of a 5 s run -
# 10% of it - in XOR, which stores nothing less for them)
FIRST_DECISION = 4
# after the first decision, profiled batches are spread over the decision interval, this many
# at most (and a batch after a deoptimisation: its data changed): SG1's 150 batches a second,
# every 4th profiled under the scheme's lock, made profiling a serial stage for a decision
# every 4 s
PROFILES_PER_INTERVAL = 16


def _c(name: str, **kw) -> Codec:
    return codec_class(name)(**kw)


def _bits(c: Codec, p: ColumnProfile) -> float:
    """Bits a value of the column costs in ``c``: what the profile measured of the step
    codecs (with :data:`STEP_SAVING_BITS` to beat), else the values' own width.  The steps'
    changes must save a whole bit more over the steps: delta-of-delta's prefix code costs
    2.5-3x the delta codec's blocks to encode (1.8 against 0.7 ns a value), for 0.26 bits
    on NEXMark's and YSB's clocks and 0.47 on CM's."""
    if c.name == "delta":
        return p.delta_value_bits + STEP_SAVING_BITS
    if c.name == "delta_of_delta":
        return p.dod_value_bits + 2 * STEP_SAVING_BITS
    return p.value_bits


def _steps(p: ColumnProfile) -> Codec:
    """A clock's codec: its steps' changes (regular intervals: a bit each) or its steps
    (jitter), whichever costs less (ties to the steps, the cheaper to encode)."""
    return min((_c("delta"), _c("delta_of_delta")), key=lambda c: _bits(c, p))


def _margin(bits: int) -> int:
    """A specialised width with one bit of headroom (clamped to 1..64)."""
    return max(1, min(64, bits + 1))


def by_rules(p: ColumnProfile, timestamp: bool, lossy_decimals: int | None) -> Codec:
    """The paper's choice (§5.1) for a column with profile ``p``, specialised."""
    runs = p.avg_run >= RLE_MIN_RUN
    if timestamp:  # fixed intervals or short bursts: delta-of-delta; jitter: deltas; long
        if p.avg_run < TS_RLE_MIN_RUN:  # bursts: BD + RLE
            return _steps(p)
        return _c("rle", inner=_c("base_delta", width=_margin(p.range_bits)))
    if p.dtype in INTEGER:
        ns = _c("ns_bit", width=_margin(p.value_bits)) if p.value_bits < 60 else _c("simple8b")
        if runs:
            return _c("rle", inner=ns)
        # the values, their steps (a reading that wanders, plugs taking turns) or their
        # steps' changes (a counter, a clock): the fewest bits, as the profile measured the
        # two step codecs exactly (a step codec must save a whole bit; ties to the values)
        return min((ns, _c("delta"), _c("delta_of_delta")), key=lambda c: _bits(c, p))
    if p.dtype in FLOAT:
        if lossy_decimals is not None:
            return _c("lossy_float", decimals=lossy_decimals)
        if runs:
            return _c("rle")
        if 0 <= p.distinct < FLOAT_DICTIONARY and \
                p.distinct * FLOAT_REPEATS <= p.rows // max(1, p.batches):  # few levels
            return _c("dictionary", max_distinct=1 << 16)
        if p.xor_rows and p.xor_value_bits + STEP_SAVING_BITS > p.width_bits:
            return _c("raw")  # XOR saves nothing (noisy readings): the values, at no cost
        return _c("xor")
    if 0 <= p.distinct < 1 << 15:  # uuids and the like: a small set of repeating values
        return _c("dictionary", max_distinct=1 << 16)
    return _c("snappy")


def candidates(p: ColumnProfile, timestamp: bool, lossy_decimals: int | None) -> list[Codec]:
    """What the cost model weighs for a column (the rules' pick among them)."""
    out = [by_rules(p, timestamp, lossy_decimals)]
    if p.dtype in INTEGER:
        out += [_c("simple8b"), _c("varbyte"), _c("ns_byte"), _c("base_delta"),
                _c("delta_of_delta"), _c("delta"), _c("rle", inner=_c("ns_bit"))]
    elif p.dtype in FLOAT:
        out += [_c("xor"), _c("rle"), _c("dictionary")]
        if lossy_decimals is not None:
            out.append(_c("lossy_float", decimals=lossy_decimals, inner=_c("delta_of_delta")))
    else:
        out += [_c("dictionary"), _c("lz4"), _c("snappy")]
    out.append(_c("raw"))
    unique: dict[str, Codec] = {}
    for c in out:
        unique.setdefault(str(c), c)
    return list(unique.values())


@dataclass(frozen=True)
class Trial:
    codec: str
    seconds: float
    bytes: int
    cost: float  # seconds: encode + write at the disk bandwidth


def by_cost(column: np.ndarray, options: list[Codec], disk_bytes_per_s: float,
            repeat: int = 2) -> tuple[Codec, list[Trial]]:
    """The option that costs least time for this column: encoding it plus writing what it
    produces at ``disk_bytes_per_s``.  Options unfit for the sample are skipped."""
    trials, best = [], None
    for c in options:
        try:
            out = c.encode(column)  # warm (compiled code, caches)
            if c.name == "raw":  # a view of the column: nothing is encoded,
                secs = 0.0  # and a clock would measure only how the scheduler felt
            else:
                secs = float("inf")
                for _ in range(repeat):  # the fastest: a preempted trial does not count
                    t0 = time.perf_counter()
                    out = c.encode(column)
                    secs = min(secs, time.perf_counter() - t0)
        except Unfit:
            continue
        t = Trial(str(c), secs, out.nbytes, secs + out.nbytes / disk_bytes_per_s)
        trials.append(t)
        if best is None or t.cost < best[1].cost:
            best = (c, t)
    return best[0], trials


@dataclass
class AdaptiveCompression(Compression):
    """Compression that re-profiles and re-selects while the query runs (module docstring)."""

    interval: float = 4.0
    profile_every: int = 4
    profile_rows: int | None = PROFILE_ROWS  # None: every row of a profiled batch
    selector: str = "rules"
    disk_bytes_per_s: float = 1.0e9
    lossy_decimals: int | None = None
    decisions: int = 0
    trials: list = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.selector not in SELECTORS:
            raise ValueError(f"unknown selector {self.selector!r} (choose from "
                             f"{', '.join(SELECTORS)})")
        if not self.interval > 0 or self.profile_every < 1:
            raise ValueError("interval must be positive and profile_every >= 1")
        self._reset()
        self._seen = 0
        self._profiled_at = float("-inf")  # time.monotonic() of the last profiled batch
        self._fallbacks = 0  # deoptimisations seen so far
        self._last = None  # the last profiled batch (the cost model's sample)
        self._decided_at = time.monotonic()

    def _reset(self) -> None:
        self.profiles = [ColumnProfile(f.dtype) for f in self.schema.fields]

    def __call__(self, batch):
        span = timers.start()
        with self._lock:  # profiling and decisions one batch at a time; encoding in parallel
            if self._profile_due() and len(batch):
                self._profiled_at = time.monotonic()
                for i, p in enumerate(self.profiles):
                    p.add_parts(batch.column_parts(i),  # the column is not made
                                step_codecs=False,  # those: once, at decide
                                sample=self.profile_rows,  # from a place that moves on
                                at=(self._seen // self.profile_every) * 40_503)
                self._last = batch
            self._seen += 1
            due = time.monotonic() - self._decided_at >= self.interval or (
                self.decisions == 0 and self._seen >= FIRST_DECISION * self.profile_every)
            if due and self._last is not None:
                self.decide()
        timers.stop(span, "profile", len(batch))
        return super().__call__(batch)

    def _profile_due(self) -> bool:
        """Until the first decision every ``profile_every``-th batch; then one each
        ``interval / PROFILES_PER_INTERVAL`` seconds, and the batch after a deoptimisation."""
        if self.decisions == 0:
            return self._seen % self.profile_every == 0
        with self._stats_lock:
            fallbacks = sum(st.fallbacks for st in self.stats.values())
        changed, self._fallbacks = fallbacks > self._fallbacks, fallbacks
        return changed or \
            time.monotonic() - self._profiled_at >= self.interval / PROFILES_PER_INTERVAL

    def decide(self) -> dict[str, str]:
        """Select (and swap in) a codec per column from the profiles; start new ones."""
        changed = {}
        for i, (f, p) in enumerate(zip(self.schema.fields, self.profiles, strict=True)):
            if p.rows == 0:
                continue
            ts = i == 0 and self.schema.stream
            last = self._last.column_array(i)[:STEP_ROWS]
            if p.dtype in INTEGER and p.step_batches == 0:
                p.add_steps(last)
            if p.dtype in FLOAT and p.xor_rows == 0:
                p.add_xor(last)
            if self.selector == "rules":
                pick = by_rules(p, ts, self.lossy_decimals)
            else:
                pick, trials = by_cost(self._last.columns[i],
                                       candidates(p, ts, self.lossy_decimals),
                                       self.disk_bytes_per_s)
                self.trials.append((f.name, trials))
            if pick != self.codecs[i]:
                self.swap(f.name, pick, reason=f"{self.selector}: {_why(p)}")
                changed[f.name] = str(pick)
        self.decisions += 1
        self._reset()
        self._decided_at = time.monotonic()
        return changed


def _why(p: ColumnProfile) -> str:
    return (f"{p.rows:,} rows, {p.value_bits} value bits, range {p.range_bits} bits, steps "
            f"{p.mean_step_bits:.1f} bits, "
            f"avg run {p.avg_run:.1f}, regular {p.regular:.2f}")


ADAPTIVE[:] = [AdaptiveCompression]  # Compression.scheme(..., 'adaptive') builds one
