"""Progress bars for long work: tqdm's (a widget in a notebook, a line in a terminal), off in
a batch run (``scabbard reproduce`` sets ``SCABBARD_BATCH``: it prints its own progress per
notebook, and a widget saved into an executed notebook is an empty box in its HTML report)."""

from __future__ import annotations

import os

BATCH = "SCABBARD_BATCH"


def bar(iterable=None, **kwargs):
    """``tqdm.auto.tqdm(iterable, **kwargs)``, disabled in a batch run."""
    from tqdm.auto import tqdm

    if os.environ.get(BATCH):
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
