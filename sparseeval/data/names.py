"""A benchmark name as a file name, a registry name and a partition key: one reversible encoding.

Benchmark names are data: they come from result files (``../escape``, ``a/b``, ``it's: 3 shots``,
``ñandú``, 300 characters), and they name folders (``<predictors>/<name>``, ``.versions/<name>``,
the pipeline's ``.npz`` files), MLflow registered models (no ``/`` or ``:``; 256 characters) and
Dagster partition keys (no ``...``: the UI's range syntax). Every such use goes through :func:`slug`:

* every character outside ``[a-z0-9._@-]`` is percent-encoded (UTF-8 bytes, upper-case hex), so
  ``/``, ``\\``, ``:``, ``%``, ``'``, spaces, upper-case letters and non-ASCII never reach a path or
  an identifier. Encoding upper-case letters makes two names that differ only in case two slugs
  that differ in more than case: no collision on a case-insensitive file system or database;
* a ``.`` at either end or next to another ``.`` is encoded too: no ``.``/``..``, no hidden name
  (``.versions`` is the versions folder), no trailing dot (dropped by Windows), no ``...``;
* a name whose stem is a Windows device name (``con``, ``nul.x``) has its first letter encoded;
* an encoding longer than :data:`MAX_SLUG` keeps its first characters and ends in ``~`` and a hash
  of the whole name (``~`` never appears otherwise: it is encoded), so it stays unique; such a slug
  is reversed through the stored names (:func:`benchmark_for`), every other one by :func:`unslug`.

The leaderboard's names (``arc``, ``gsm8k``, ``mmlu_pro``, ``arc@0shot``, ``sparseeval-joint``) are
their own slugs, so existing folders, registry entries and partitions keep their names.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import unquote

#: characters kept as they are (everything else is percent-encoded)
SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._@-")
#: longest slug: room for ``.<slug>.link-<pid>-<8 hex>`` (255-byte file names) and ``sparseeval-<slug>``
#: (MLflow's 256-character names)
MAX_SLUG = 120
#: hex digits of the sha256 of the name that end a shortened slug
HASH_CHARS = 24
#: the longest benchmark name stored (MLflow keeps it in 500-character input tags and dataset names)
MAX_NAME = 400
_DEVICES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})
_SLUG_RE = re.compile(r"(?:[a-z0-9._@-]|%[0-9A-F]{2})+")


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def slug(name: str) -> str:
    """``name`` as a single safe path component, registry name part and partition key (see module doc)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a benchmark name must be a non-empty string, got {name!r}")
    n = len(name)
    device = name.split(".", 1)[0].lower() in _DEVICES
    tokens = []
    for i, ch in enumerate(name):
        dot_risk = ch == "." and (i == 0 or i == n - 1 or name[i - 1] == "." or (i + 1 < n and name[i + 1] == "."))
        keep = ch in SAFE and not dot_risk and not (device and i == 0)
        tokens.append(ch if keep else _escape(ch))
    encoded = "".join(tokens)
    if len(encoded) <= MAX_SLUG:
        return encoded
    room = MAX_SLUG - 1 - HASH_CHARS
    head, size = [], 0
    for token in tokens:  # whole tokens only: an escape is never cut in half
        if size + len(token) > room:
            break
        head.append(token)
        size += len(token)
    return "".join(head) + "~" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:HASH_CHARS]


def is_shortened(key: str) -> bool:
    """True for a slug that ends in the hash of a long name (reversed through the stored names)."""
    return "~" in key


def unslug(key: str) -> str:
    """The name whose :func:`slug` is ``key``; ValueError for a shortened slug or one :func:`slug`
    never writes (so a folder or partition that was not made from a name is never taken for one)."""
    if is_shortened(key):
        raise ValueError(f"{key!r} is a shortened name: look it up among the stored names")
    if not _SLUG_RE.fullmatch(key):
        raise ValueError(f"{key!r} is not an encoded benchmark name")
    name = unquote(key, errors="strict")
    if slug(name) != key:
        raise ValueError(f"{key!r} is not the encoding of a benchmark name")
    return name


def benchmark_for(key: str, names: Iterable[str]) -> str | None:
    """The benchmark among ``names`` whose slug is ``key`` (None when none is): a shortened slug
    resolved through the stored names, any other decoded and checked against them."""
    names = list(names)
    if not is_shortened(key):
        try:
            name = unslug(key)
        except ValueError:
            return None
        return name if name in set(names) else None
    return next((n for n in names if slug(n) == key), None)
