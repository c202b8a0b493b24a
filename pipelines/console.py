"""The pipeline's console logger: Dagster's own, with a publishing check's refusal in one line.

Why: a blocking publishing check that refuses a proposal is an outcome the pipeline is built to reach (the
champion stays, the summary says ``REJECTED`` and why), not an error. Dagster reports it as a step failure
with the stack trace of ``DagsterAssetCheckFailedError``, twice (the step, then the run), which reads as a
crash in ``make run``'s log and the daemon's. The refusal keeps its first line and the checks it names; every
other failure keeps its trace, and the Dagster UI's event log is unchanged (it reads the events, not this).
"""

from __future__ import annotations

import logging
from typing import Any

import dagster as dg

#: the error class Dagster raises for a failed blocking asset check
REFUSED = "dagster._core.errors.DagsterAssetCheckFailedError: "


def one_line(message: str) -> str:
    """``message`` without the trace when it reports a refused blocking check: the first line, then what the
    error says up to its stack trace (``1 blocking asset check failed ...: asset: check``); any other message
    as it is."""
    head, found, rest = message.partition(REFUSED)
    if not found:
        return message
    said = rest.split("\nStack Trace:", 1)[0]
    return " ".join([head.strip(), "(a publishing check refused it:", " ".join(said.split()) + ")"])


class RefusalsInOneLine(logging.Filter):
    """Rewrites a refused check's failure record into one line; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and REFUSED in record.msg:
            record.msg, record.args = one_line(record.msg), ()
        return True


@dg.logger(dg.colored_console_logger.config_schema,
           description="Dagster's colored console logger, a refused publishing check in one line")
def console(init_context: Any) -> logging.Logger:
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(RefusalsInOneLine())
    return logger
