"""The one atomic file write: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(out: str | Path, write: Callable[[Path], object], *, suffix: str = "") -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``out``, fsync it, then rename it to ``out``.

    ``suffix`` keeps an extension writers insist on (``np.savez`` appends ``.npz`` otherwise). The
    temporary file is removed if ``write`` fails, so nothing half-written is ever left behind.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def atomic_write_text(out: str | Path, text: str) -> Path:
    return atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_folder(out: str | Path, fill: Callable[[Path], object]) -> Path:
    """Call ``fill(tmp)`` on a temporary folder beside ``out``, then put it in ``out``'s place in one rename
    (an existing ``out`` is moved aside first and removed after): a reader sees the old folder or the new
    one, never a mix. The temporary folder is removed if ``fill`` fails."""
    import shutil

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fill(tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
