"""Progress of long work: lines said at once (:func:`say`: what the command line gives long
work as its ``log``, and the default of the functions that report by default), and bars - tqdm's (a widget in a
notebook, a line in a terminal), off in a batch run (``scabbard reproduce`` sets
``SCABBARD_BATCH``: it prints its own progress per notebook, and a widget saved into an
executed notebook is an empty box in its HTML report)."""

from __future__ import annotations

import os

BATCH = "SCABBARD_BATCH"


def say(line: str) -> None:
    """Print a line of progress now (not when the output's buffer fills)."""
    print(line, flush=True)


def bar(iterable=None, **kwargs):
    """``tqdm.auto.tqdm(iterable, **kwargs)``, disabled in a batch run."""
    from tqdm.auto import tqdm

    if os.environ.get(BATCH):
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
