"""Run the readers on a folder of real published harness output and print what each unit gives.

    python bench/real_outputs.py FOLDER [FOLDER ...] [--max-units N]

For every unit :func:`sparseeval.data.readers.detect.discover` finds: the format recognised, the rows stored
(responses, scores), the settings recorded (distinct n_shot / metric / harness_version / limit / run_at
present) and the refused / skipped notes; then the files discover itself noted. Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from sparseeval.data.readers.base import InputError
from sparseeval.data.readers.detect import discover, read_source


def _settings(parsed) -> str:
    frames = [f for f in (parsed.responses, parsed.scores) if f.height]
    out = []
    for col in ("n_shot", "metric", "harness_version", "limit", "run_at"):
        values = {v for f in frames if col in f.columns for v in f[col].drop_nulls().to_list()}
        if values:
            shown = sorted(str(v)[:19] for v in values)
            out.append(f"{col}={','.join(shown[:3])}{'…' if len(shown) > 3 else ''}")
    return " ".join(out) or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--max-units", type=int, default=40, help="units printed per folder (all are read)")
    args = ap.parse_args(argv)
    for folder in args.folders:
        t0 = time.perf_counter()
        units, notes = discover(folder)
        print(f"\n## {folder}  ({len(units)} units, {len(notes)} discovery notes)\n")
        print("| unit | format | responses | scores | settings | refused | skipped |")
        print("|---|---|---:|---:|---|---:|---:|")
        totals: Counter[str] = Counter()
        formats: Counter[str] = Counter()
        first_reasons: dict[str, str] = {}
        for i, unit in enumerate(units):
            try:
                parsed = read_source(unit)
            except InputError as exc:
                formats["(refused)"] += 1
                totals["refused units"] += 1
                first_reasons.setdefault("unit refused", str(exc)[:160])
                if i < args.max_units:
                    print(f"| {unit.relative_to(folder) if unit != folder else '.'} | refused | 0 | 0 | - | 1 | 0 |")
                continue
            refused = [n for n in parsed.notes if n.status == "refused"]
            skipped = [n for n in parsed.notes if n.status == "skipped"]
            for n in parsed.notes:
                first_reasons.setdefault(f"{n.status}: {n.reason[:60]}", f"{n.part}: {n.reason}"[:200])
            formats[parsed.format or "?"] += 1
            totals["responses"] += parsed.responses.height
            totals["scores"] += parsed.scores.height
            totals["refused parts"] += len(refused)
            totals["skipped parts"] += len(skipped)
            if i < args.max_units:
                name = unit.relative_to(folder) if unit != folder else Path(".")
                print(f"| {name} | {parsed.format} | {parsed.responses.height} | {parsed.scores.height} | "
                      f"{_settings(parsed)} | {len(refused)} | {len(skipped)} |")
        if len(units) > args.max_units:
            print(f"| … {len(units) - args.max_units} more units | | | | | | |")
        print(f"\nformats: {dict(formats)}; totals: {dict(totals)}; {time.perf_counter() - t0:.1f} s")
        for n in notes[:5]:
            print(f"- discovery {n.status}: {n.part}: {n.reason}")
        if len(notes) > 5:
            print(f"- … {len(notes) - 5} more discovery notes ({dict(Counter(n.status for n in notes))})")
        for key, example in list(first_reasons.items())[:8]:
            print(f"- {key!s}: e.g. {example}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
