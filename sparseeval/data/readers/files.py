"""Reading a results file safely, shared by the harness readers (lm-eval, lighteval, the leaderboard).

Every reader opens JSON and text the same way, so a bad file is refused the same way whatever its format:
a syntax error names the line and column, a Git LFS pointer (a clone without ``git lfs pull``) says so
instead of "invalid JSON", and an unreadable file is one :class:`~sparseeval.data.readers.base.InputError`.
The harnesses also name things alike (date ids in file names, sanitized model names as folders), and
those are read here once.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparseeval.data.readers.base import InputError

LFS_POINTER = "version https://git-lfs.github.com/spec/v1"
LFS_REASON = "Git LFS pointer: run `git lfs pull`"


def read_json(path: Path) -> Any:
    """Parse a JSON file; a syntax error becomes an InputError with the line and column."""
    text = read_text(path)
    if text.startswith(LFS_POINTER):
        raise InputError(path, LFS_REASON)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON ({exc.msg}) at column {exc.colno}", line=exc.lineno) from exc


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read file: {exc}") from exc


def is_lfs_pointer(path: Path) -> bool:
    """A Git LFS pointer file (what a clone without ``git lfs pull`` holds instead of the data)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(LFS_POINTER)) == LFS_POINTER.encode()
    except OSError:
        return False


def parse_date_id(date_id: str) -> datetime | None:
    """``2024-05-01T12-34-56.123456`` / ``2024-05-01T12-34-56`` / ``2024-05-01T12:34:56`` (ISO with or without
    ``:`` replaced, as both harnesses name files) -> naive datetime (the writer's local time)."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})[-:](\d{2})(\.\d+)?", date_id)
    if not m:
        return None
    try:
        return datetime.fromisoformat(f"{m[1]}T{m[2]}:{m[3]}:{m[4]}{m[5] or ''}")
    except ValueError:
        return None


def unix_to_datetime(value: object) -> datetime | None:
    """A unix timestamp (as the harness writes ``date``) -> naive UTC datetime; other values -> None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 1e8 < value < 1e11:
        return datetime.fromtimestamp(float(value), tz=UTC).replace(tzinfo=None)
    return None


def model_from_folder(folder: Path) -> str:
    """``org__model`` (lm-eval's sanitized name) or ``details_org__model`` -> ``org/model``."""
    name = folder.name
    name = name.removeprefix("details_")
    name = re.sub(r"-details$", "", name)
    return name.replace("__", "/", 1)
