"""Predictors on the Hugging Face Hub: ``hf://ORG/REPO[@revision][/PATH]`` wherever a folder is accepted.

The form is the one ``huggingface_hub``'s own file system uses: a model repo by default,
``hf://datasets/ORG/REPO...`` for a dataset repo, an optional ``@revision`` (branch, tag or commit
sha) and an optional ``/PATH`` to the predictor folder inside the repo (a repo may hold several,
``hf://ORG/REPO/arc``). The predictor's files are downloaded by the real client (``snapshot_download``,
only that folder's files) into its own cache, pinned to the commit the revision resolves to, so a
second use costs one metadata call and ``HF_HUB_OFFLINE=1`` uses the cache with none. The folder is
then loaded like a local one: :func:`sparseeval.estimate.artifact.load_predictor` verifies the content hash
of ``predictor.json`` and the state file, so a download that does not match what was published is
refused, never used. Faults (missing or private repo, gated repo, unknown revision, offline with an
empty cache, no predictor at that path) are one line each, the same words as the Hub sources
(:func:`sparseeval.data.access.hub_sources.explain`). ``HF_TOKEN`` is the only credential, as for the sources.

Publishing is the Hub's own command: ``hf upload ORG/REPO PREDICTOR_DIR .`` (see the README).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sparseeval.core.errors import UserError

log = logging.getLogger(__name__)

PREFIX = "hf://"
#: the files of a predictor folder the download takes (the model card and licence come along)
FILES = ("predictor.json", "state.safetensors", "state.pt", "README.md", "LICENSE")


class PredictorSourceError(UserError, ValueError):
    """A ``hf://`` predictor that cannot be had: malformed, or a Hub fault (one line, naming it)."""


@dataclass(frozen=True)
class HubPredictor:
    """``hf://[datasets/]ORG/REPO[@revision][/PATH]``."""

    repo: str
    repo_type: str = "model"
    revision: str = "main"
    path: str = ""

    def __str__(self) -> str:
        kind = "datasets/" if self.repo_type == "dataset" else ""
        rev = f"@{self.revision}" if self.revision != "main" else ""
        return f"{PREFIX}{kind}{self.repo}{rev}" + (f"/{self.path}" if self.path else "")


def is_hub(text: str | Path) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def parse(text: str) -> HubPredictor:
    """``hf://ORG/REPO``, ``hf://ORG/REPO@v1/arc``, ``hf://datasets/ORG/REPO@SHA``, ``hf://models/ORG/REPO``."""
    body = text.strip()[len(PREFIX):]
    repo_type = "model"
    for kind, name in (("datasets/", "dataset"), ("models/", "model")):
        if body.startswith(kind):
            body, repo_type = body[len(kind):], name
    if body.startswith("spaces/"):
        raise PredictorSourceError(f"{text}: a Space is not a predictor repo: use hf://ORG/REPO (a model repo) "
                                   "or hf://datasets/ORG/REPO")
    parts = body.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise PredictorSourceError(f"{text}: expected hf://ORG/REPO[@revision][/PATH] "
                                   "(or hf://datasets/ORG/REPO... for a dataset repo)")
    name, _, revision = parts[1].partition("@")
    path = "/".join(parts[2:]).strip("/")
    if not name or "@" in revision or ".." in path.split("/"):
        raise PredictorSourceError(f"{text}: expected hf://ORG/REPO[@revision][/PATH]")
    return HubPredictor(f"{parts[0]}/{name}", repo_type, revision or "main", path)


def fetch(ref: HubPredictor, cache_dir: str | Path | None = None) -> Path:
    """The local folder (in the client's cache) holding the predictor ``ref`` names, downloaded if needed.

    Raises :class:`PredictorSourceError` with the Hub fault in one line."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from sparseeval.data.access.hub_sources import _endpoint, _offline, _token, explain

    cache = cache_dir if cache_dir is not None else os.environ.get("HF_HUB_CACHE")
    prefix = f"{ref.path}/" if ref.path else ""
    # the client reads HF_HUB_OFFLINE once, at import: follow the environment as it is now (a long-lived
    # process, or one that imported the client while offline, would otherwise stay offline or online)
    constants.HF_HUB_OFFLINE = _offline()
    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # a few small files: the client's bars would only bury the command's output
    try:
        snapshot = Path(snapshot_download(
            ref.repo, repo_type=ref.repo_type, revision=ref.revision, cache_dir=str(cache) if cache else None,
            allow_patterns=[prefix + f for f in FILES], local_files_only=_offline(), endpoint=_endpoint(),
            token=_token()))
    except Exception as exc:
        raise PredictorSourceError(f"{ref}: {explain(exc)}") from None
    finally:
        if not quiet:
            enable_progress_bars()
    folder = snapshot / ref.path if ref.path else snapshot
    if not (folder / "predictor.json").is_file():
        where = f"folder {ref.path!r}" if ref.path else "the repo's top folder"
        raise PredictorSourceError(f"{ref}: no predictor.json in {where} at commit {snapshot.name} "
                                   "(give the predictor's folder as hf://ORG/REPO[@revision]/PATH)")
    log.info("%s: commit %s (%s)", ref, snapshot.name, folder)
    return folder


def resolve(source: str | Path) -> Path:
    """A local folder as it is, or a ``hf://`` predictor fetched (:func:`fetch`)."""
    if is_hub(source):
        return fetch(parse(str(source)))
    return Path(source)
