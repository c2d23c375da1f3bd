"""A dependency-free progress bar: drawn on a terminal's stderr, silent otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """Progress over ``total`` units of work.

    Draws on ``stream`` (stderr by default) only when it is a terminal and ``enabled`` is
    true, so that ``--json`` output and pipes stay clean. Use as a context manager.
    """

    def __init__(self, total: int | None, desc: str = "", *, enabled: bool = True, stream=None):
        self.total = total
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(enabled) and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.done = 0
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._status = ""

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        if self.enabled and self.total is None:
            # open-ended work (an exact solve) runs inside compiled code that cannot report:
            # a ticker thread keeps the elapsed time moving so the terminal shows it is alive
            import threading

            self._stop = threading.Event()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._draw(force=True)

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1, status: str | None = None) -> None:
        self.done += n
        if status is not None:
            self._status = status
        self._draw()

    def set_status(self, status: str) -> None:
        self._status = status
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        elapsed = now - self._start
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 24
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            text = f"\r{self.desc} [{bar}] {self.done}/{self.total} {elapsed:6.1f}s {self._status}"
        else:
            count = f" {self.done}" if self.done else ""
            text = f"\r{self.desc}{count} {elapsed:6.1f}s {self._status}"
        self.stream.write(text[:200].ljust(80))
        self.stream.flush()

    def close(self) -> None:
        ticker = getattr(self, "_ticker", None)
        if ticker is not None:
            self._stop.set()
            ticker.join()
            self._ticker = None
        if self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False
