"""Progress for long commands: a bar on a terminal, plain log lines otherwise (logs, CI, pipes)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator

log = logging.getLogger("sparseeval.interfaces.progress")


@contextlib.contextmanager
def progress_bar(desc: str, *, total: int | None = None, unit: str = "step") -> Iterator[Callable[[str], None]]:
    """Yield ``tick(note)``: advances a tqdm bar on stderr when it is a terminal (and logging is not
    quieted to warnings), else logs one INFO line per step, which ``--quiet`` silences."""
    if sys.stderr.isatty() and log.getEffectiveLevel() <= logging.INFO:
        from tqdm import tqdm

        with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False) as bar:
            def tick(note: str) -> None:
                bar.set_postfix_str(note[:60])
                bar.update(1)

            yield tick
        return
    count = 0

    def log_tick(note: str) -> None:
        nonlocal count
        count += 1
        log.info("%s %d%s: %s", desc, count, f"/{total}" if total else "", note)

    yield log_tick
