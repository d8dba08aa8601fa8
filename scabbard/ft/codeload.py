"""A run's compiled code loaded while the rest of it opens (a recovery's cold restart)."""

from __future__ import annotations

import threading
import time

from scabbard.storage import segment as seg_fmt


class CodeLoader:
    """The engine's compiled code loaded (:meth:`Engine.warm_up`), on a thread of its own or
    on the caller's; :meth:`join` records when it was done as the ``code_loaded`` phase and
    raises its error, if any."""

    def __init__(self, engine, batch, writable: bool = False):
        self.engine, self.batch, self.writable = engine, batch, writable
        self.thread: threading.Thread | None = None
        self.done_at: float | None = None
        self.error: BaseException | None = None

    def _load(self) -> None:
        try:
            self.engine.warm_up(self.batch, self.writable)
            if self.writable:  # a recovery persists and hashes from its first task on
                seg_fmt.warm_up(self.batch)
        except BaseException as e:  # noqa: BLE001 - raised by join()
            self.error = e
        self.done_at = time.time()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._load, name="code-loading", daemon=True)
        self.thread.start()

    def join(self, phases: dict) -> None:
        if self.thread is None and self.done_at is None:
            self._load()
        elif self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        phases["code_loaded"] = self.done_at
