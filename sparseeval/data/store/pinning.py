"""Pin a source's bytes before reading it: read exactly the named file, exactly once.

Two classes of silent corruption come from reading a source by its path more than once, or through a
reader that interprets the path:

* DuckDB's (and Polars') readers expand ``[ ] ? * { }`` in a path as a glob, even when the path is a
  bound parameter: ``run[12].parquet`` reads ``run1.parquet`` and ``run2.parquet``;
* validation and insert reading the file at different times store what was never validated when a
  producer rewrites the file in between (the sensor fires while it writes).

So the store copies each unit (a file, or a run folder with its files) once into a private folder
beside the database, under names with the glob characters replaced, hashes the copy while writing
it, and every later step (format detection, the bulk SQL checks, the readers, the insert) reads only
that copy. Messages that name the copy are mapped back to the path the user gave.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparseeval.data.readers.base import InputError, ParsedResults, PartNote

_GLOB = re.compile(r"[\[\]?*{}]")
PIN_PREFIX = ".sparseeval-pin-"


def safe_name(name: str) -> str:
    """``name`` with glob characters replaced by ``_`` (other characters kept: readers parse names)."""
    return _GLOB.sub("_", name)


@dataclass
class PinnedUnit:
    original: Path  #: the path as given
    copy: Path  #: the private copy every reader reads
    sha256: str  #: of the copy's bytes (and, for a folder, its relative file names)

    def to_original(self, text: str) -> str:
        """Replace the copy's path in a message with the original one."""
        return text.replace(str(self.copy), str(self.original))

    def map_error(self, exc: InputError) -> InputError:
        mapped = InputError(self.to_original(exc.path), self.to_original(exc.problem), line=exc.line,
                            column=exc.column)
        return mapped

    def map_parsed(self, parsed: ParsedResults) -> ParsedResults:
        parsed.notes = [PartNote(self.to_original(n.part), n.status, self.to_original(n.reason))
                        for n in parsed.notes]
        parsed.sources = [Path(self.to_original(str(s))) for s in parsed.sources]
        return parsed


def unit_sha256(path: Path) -> str:
    """The sha256 :func:`pinned` would compute for ``path``, without copying (the sensor uses it to
    tell a unit the store already holds)."""
    digest = hashlib.sha256()
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            dirnames.sort()
            rel = Path(dirpath).relative_to(path)
            for name in sorted(filenames):
                src = Path(dirpath) / name
                if src.is_file():
                    digest.update(str(rel / name).encode("utf-8", "surrogateescape") + b"\0")
                    _hash_file(src, digest)
    else:
        _hash_file(path, digest)
    return digest.hexdigest()


def _hash_file(src: Path, digest: hashlib._Hash) -> None:
    with src.open("rb") as fin:
        while block := fin.read(1 << 22):
            digest.update(block)


def _copy_file(src: Path, dst: Path, digest: hashlib._Hash) -> None:
    with src.open("rb") as fin, dst.open("wb") as fout:
        while block := fin.read(1 << 22):
            digest.update(block)
            fout.write(block)


@contextlib.contextmanager
def pinned(path: Path, workdir: Path) -> Iterator[PinnedUnit]:
    """Copy ``path`` (file or folder) into a fresh folder under ``workdir``; removed on exit.

    Symbolic links are followed for the unit itself and for files inside a folder, but a folder is
    walked without following linked sub-folders, so a link loop cannot hang the copy. A file that
    cannot be read raises :class:`InputError` naming it.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=PIN_PREFIX, dir=workdir))
    try:
        digest = hashlib.sha256()
        copy = root / safe_name(path.name or "unit")
        try:
            if path.is_dir():
                copy.mkdir()
                for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
                    dirnames.sort()
                    rel = Path(dirpath).relative_to(path)
                    target_dir = copy / Path(*[safe_name(p) for p in rel.parts]) if rel.parts else copy
                    target_dir.mkdir(parents=True, exist_ok=True)
                    for name in sorted(filenames):
                        src = Path(dirpath) / name
                        if not src.is_file():
                            continue
                        digest.update(str(rel / name).encode("utf-8", "surrogateescape") + b"\0")
                        _copy_file(src, target_dir / safe_name(name), digest)
            else:
                _copy_file(path, copy, digest)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        yield PinnedUnit(original=path, copy=copy, sha256=digest.hexdigest())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def remove_stale_pins(workdir: Path) -> None:
    """Remove pin folders left behind by a killed process (each ingest removes its own)."""
    if not workdir.is_dir():
        return
    for entry in workdir.iterdir():
        if entry.name.startswith(PIN_PREFIX):
            # a live ingest in another process may own it: only remove folders not touched for an hour
            with contextlib.suppress(OSError):
                if time.time() - entry.stat().st_mtime > 3600:
                    shutil.rmtree(entry, ignore_errors=True)
