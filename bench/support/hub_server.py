"""A tiny stand-in for the Hub on 127.0.0.1, answering the endpoints huggingface_hub 2.4 calls.

Read from the client's source (hf_api.py, file_download.py): ``GET /api/datasets/{repo}/revision/{rev}``
(``dataset_info``), ``GET /api/datasets?author=ORG`` (``list_datasets``), ``GET
/api/datasets/{repo}/tree/{rev}`` (``list_repo_tree``; ``oid`` is the blob id), and ``HEAD``/``GET
/datasets/{repo}/resolve/{rev}/{path}`` (``hf_hub_download``: ``X-Repo-Commit``, ``ETag``,
``X-Linked-Etag``/``X-Linked-Size`` for LFS files). Errors carry ``X-Error-Code`` as the Hub's do.
Model repos (``self.models``) answer the same endpoints without the ``datasets`` prefix: ``GET
/api/models/{repo}/revision/{rev}`` (``model_info``, which ``snapshot_download`` calls) and ``HEAD``/``GET
/{repo}/resolve/{rev}/{path}``. Every request is counted, so tests assert what a refresh cost.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    commits: list[tuple[str, dict[str, bytes]]] = field(default_factory=list)  # (sha, files), oldest first
    gated: bool = False
    token: str | None = None     # private: served only to "Authorization: Bearer <token>" (else 401 RepoNotFound)
    rate_limit: int = 0          # answer this many requests with 429 (Retry-After: 0) first
    missing: set[str] = field(default_factory=set)   # LFS paths listed but not resolvable
    moved_to: str | None = None  # serve files with this X-Repo-Commit (the branch moved mid-download)

    def push(self, files: dict[str, bytes]) -> str:
        """A new commit holding the previous files plus ``files``; returns its sha."""
        merged = {**(self.commits[-1][1] if self.commits else {}), **files}
        sha = hashlib.sha1(json.dumps(sorted((k, hashlib.sha1(v).hexdigest()) for k, v in merged.items()))
                           .encode()).hexdigest()
        self.commits.append((sha, merged))
        return sha

    def files(self, rev: str) -> tuple[str, dict[str, bytes]] | None:
        if rev == "main":
            return self.commits[-1]
        return next((c for c in self.commits if c[0] == rev), None)


def files_from(folder: Path, prefix: str = "") -> dict[str, bytes]:
    return {prefix + str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}  # dataset repos
        self.models: dict[str, Repo] = {}  # model repos
        self.calls: list[str] = []
        self.auth: list[str | None] = []  # the Authorization header of every request, in order
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub.handle(self, head=True)

            def do_GET(self) -> None:
                hub.handle(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: bytes = b"", head: bool = False,
              headers: dict[str, str] | None = None) -> None:
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(self, h: BaseHTTPRequestHandler, code: int, error_code: str, head: bool) -> None:
        self._send(h, code, json.dumps({"error": error_code}).encode(), head,
                   {"X-Error-Code": error_code, "X-Error-Message": error_code, "Content-Type": "application/json"})

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        self.calls.append(f"{h.command} {path}")
        self.auth.append(h.headers.get("Authorization"))
        if path == "/api/datasets":
            author = parse_qs(url.query).get("author", [""])[0]
            ids = [{"id": r} for r in sorted(self.repos) if r.startswith(author + "/")]
            return self._send(h, 200, json.dumps(ids).encode(), head, {"Content-Type": "application/json"})
        if path.startswith(("/api/datasets/", "/datasets/")):
            api, repos = path.startswith("/api/"), self.repos
            rest = path.removeprefix("/api/datasets/" if api else "/datasets/").split("/")
        else:
            api, repos = path.startswith("/api/models/"), self.models
            rest = path.removeprefix("/api/models/" if api else "/").split("/")
        repo = repos.get("/".join(rest[:2]))
        if repo is None or (repo.token and h.headers.get("Authorization") != f"Bearer {repo.token}"):
            return self._error(h, 401, "RepoNotFound", head)  # the Hub answers a private repo as a missing one
        if repo.rate_limit > 0:
            repo.rate_limit -= 1
            return self._send(h, 429, b"slow down", head, {"Retry-After": "0"})
        if repo.gated:
            return self._error(h, 401, "GatedRepo", head)
        kind, rev, inner = rest[2], rest[3] if len(rest) > 3 else "main", "/".join(rest[4:])
        found = repo.files(rev)
        if found is None:
            return self._error(h, 404, "RevisionNotFound", head)
        sha, files = found
        js = {"Content-Type": "application/json"}
        if api and kind == "revision":
            body = {"id": "/".join(rest[:2]), "sha": sha, "private": False,
                    "siblings": [{"rfilename": p} for p in sorted(files)]}
            return self._send(h, 200, json.dumps(body).encode(), head, js)
        if api and kind == "tree":
            body = [{"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                    for p, b in sorted(files.items()) if p.startswith(inner)]
            return self._send(h, 200, json.dumps(body).encode(), head, js)
        if not api and kind == "resolve":
            if inner in repo.missing or inner not in files:
                return self._error(h, 404, "EntryNotFound", head)
            body = files[inner]
            etag = hashlib.sha256(body).hexdigest()
            headers = {"X-Repo-Commit": repo.moved_to or sha, "ETag": f'"{etag}"'}
            if inner.endswith(".parquet"):  # LFS files: the Hub names the linked object's etag and size
                headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(body))}
            return self._send(h, 200, body, head, headers)
        return self._error(h, 404, "EntryNotFound", head)
