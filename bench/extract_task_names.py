"""Extract every task and group name the harnesses define, for the task-mapping tests.

Reads bare git mirrors (``git show TAG:path``, ``git ls-tree``; no checkout, nothing imported or run):

* **lm-evaluation-harness**: every ``lm_eval/tasks/**/*.yaml`` at each tag. A config with ``group: G`` and a
  ``task:`` list defines group G and its members; a config with ``task: T`` (a string) defines task T, and its
  ``tag:`` (0.4.3+) or ``group:`` (0.4.0-0.4.2, where a task's ``group`` key meant a tag) puts it in those
  tags. ``include:`` is followed (relative to the including file), later keys win, as the harness does.
* **lighteval**: every ``LightevalTaskConfig(name=..., suite=[...])`` call with literal arguments in
  ``src/lighteval/tasks/**.py`` and ``community_tasks/*.py`` (read with :mod:`ast`), and the
  ``tasks_table.jsonl`` of the early releases. Configs built in loops or from f-strings are counted, not named.

Writes ``tests/fixtures/tasks/task_names.json.gz``: per release the tasks, groups (direct members), tags
(members) and the mirror's commit sha, tag and date. Run:

    python bench/extract_task_names.py --lm-eval /work/.mirror/EleutherAI+lm-evaluation-harness/repo \\
        --lighteval /work/.mirror/huggingface+lighteval/repo
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import posixpath
import subprocess
from pathlib import Path
from typing import Any

import yaml

LM_EVAL_TAGS = ("v0.4.2", "v0.4.12")
LIGHTEVAL_TAGS = ("v0.3.0", "v0.8.0", "v0.13.0")
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tasks" / "task_names.json.gz"


class _Loader(yaml.SafeLoader):
    """YAML loader that reads the harness' custom tags (``!function utils.x``) as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def read_blobs(repo: Path, tag: str, paths: list[str]) -> dict[str, str]:
    """Contents of ``paths`` at ``tag`` in one ``git cat-file --batch`` call."""
    spec = "".join(f"{tag}:{p}\n" for p in paths).encode()
    out = subprocess.run(["git", "--git-dir", str(repo), "cat-file", "--batch"], input=spec, check=True,
                         capture_output=True).stdout
    blobs: dict[str, str] = {}
    pos = 0
    for p in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        if header[-1] == b"missing":
            pos = header_end + 1
            continue
        size = int(header[2])
        blobs[p] = out[header_end + 1: header_end + 1 + size].decode("utf-8", "replace")
        pos = header_end + 1 + size + 1
    return blobs


def provenance(repo: Path, tag: str, url: str) -> dict[str, str]:
    sha = git(repo, "rev-list", "-n1", tag).strip()
    return {"repo": url, "tag": tag, "commit": sha, "date": git(repo, "log", "-1", "--format=%cs", sha).strip()}


def _as_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def lm_eval_release(repo: Path, tag: str) -> dict[str, Any]:
    files = [p for p in git(repo, "ls-tree", "-r", "--name-only", tag, "lm_eval/tasks").splitlines()]
    blobs = read_blobs(repo, tag, files)
    parsed: dict[str, dict] = {}
    for path, text in blobs.items():
        try:
            data = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            parsed[path] = data

    def merged(path: str, seen: tuple[str, ...] = ()) -> dict:
        data = parsed.get(path, {})
        include = data.get("include")
        if not isinstance(include, str) or path in seen:
            return data
        base = merged(posixpath.normpath(posixpath.join(posixpath.dirname(path), include)), (*seen, path))
        return {**base, **{k: v for k, v in data.items() if k != "include"}}

    tasks: set[str] = set()
    inline: set[str] = set()  # ``- task: name`` entries of a group: a new task, or a reference with overrides
    groups: dict[str, list[str]] = {}
    tags: dict[str, set[str]] = {}
    for path in parsed:
        if not path.endswith(".yaml"):
            continue
        config = merged(path)
        task, group = config.get("task"), config.get("group")
        if isinstance(task, list) and isinstance(group, str):
            members = []
            for entry in task:
                if isinstance(entry, str):
                    members.append(entry)
                elif isinstance(entry, dict) and isinstance(entry.get("task"), str):
                    members.append(entry["task"])
                    inline.add(entry["task"])
            groups.setdefault(group, [])
            groups[group] += [m for m in members if m not in groups[group]]
        elif isinstance(task, str):
            tasks.add(task)
            for name in _as_list(config.get("tag")) + _as_list(group):
                tags.setdefault(name, set()).add(task)
    tasks |= {t for t in inline if t not in groups and t not in tags}  # references name a group or tag
    return {"tasks": sorted(tasks), "groups": {g: groups[g] for g in sorted(groups)},
            "tags": {t: sorted(m) for t, m in sorted(tags.items())}}


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def lighteval_release(repo: Path, tag: str) -> dict[str, Any]:
    files = [p for p in git(repo, "ls-tree", "-r", "--name-only", tag).splitlines()
             if (p.startswith("src/lighteval/tasks/") or p.startswith("community_tasks/"))
             and (p.endswith(".py") or p.endswith("tasks_table.jsonl"))]
    blobs = read_blobs(repo, tag, files)
    names: set[tuple[str, str]] = set()
    dynamic = 0
    for path, text in blobs.items():
        if path.endswith(".jsonl"):
            for line in text.splitlines():
                if line.strip():
                    row = json.loads(line)
                    names.add(((row.get("suite") or [""])[0], row["name"]))  # the first suite is the key's
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if fname != "LightevalTaskConfig":
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name = _literal(kw["name"]) if "name" in kw else None
            if not isinstance(name, str):
                dynamic += 1
                continue
            suites = _literal(kw["suite"]) if "suite" in kw else None
            names.add((str(suites[0]) if isinstance(suites, list | tuple) and suites else "", name))
    return {"tasks": [f"{s}|{n}" if s else n for s, n in sorted(names)], "dynamic_configs": dynamic}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lm-eval", type=Path, required=True, help="bare mirror of lm-evaluation-harness")
    parser.add_argument("--lighteval", type=Path, required=True, help="bare mirror of lighteval")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    out: dict[str, Any] = {"lm-eval": {}, "lighteval": {}}
    for tag in LM_EVAL_TAGS:
        out["lm-eval"][tag] = {**provenance(args.lm_eval, tag, "github.com/EleutherAI/lm-evaluation-harness"),
                               **lm_eval_release(args.lm_eval, tag)}
    for tag in LIGHTEVAL_TAGS:
        out["lighteval"][tag] = {**provenance(args.lighteval, tag, "github.com/huggingface/lighteval"),
                                 **lighteval_release(args.lighteval, tag)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(out, indent=0, sort_keys=True).encode()
    with gzip.GzipFile(args.out, "wb", mtime=0) as fh:  # mtime 0: the same input gives the same bytes
        fh.write(text)
    for harness, releases in out.items():
        for tag, rel in releases.items():
            print(f"{harness} {tag} ({rel['commit'][:12]}, {rel['date']}): {len(rel['tasks'])} tasks, "
                  f"{len(rel.get('groups', {}))} groups, {len(rel.get('tags', {}))} tags"
                  + (f", {rel['dynamic_configs']} configs built at run time" if "dynamic_configs" in rel else ""))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
