"""Render every corpus, external and fixture file to a folder (md + json, or the error line), so two
versions of the code can be diffed byte for byte: a performance change changes no report.

    python benchmarks/render_all.py OUT_DIR [--shard 0/2] [--html]
    diff -r OUT_BEFORE OUT_AFTER

Run it from the repository root: the reports name their inputs by the path given (../shared/...,
fixtures/...), so both runs must start in a checkout at the same depth. Each file is diagnosed
alone; files named NAME.rankN.* are also diagnosed together, as one distributed run. To render an
older commit, unpack it (`git archive COMMIT | tar -x -C /tmp/base`) and run this script with
PYTHONPATH=/tmp/base.
"""
from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path

ROOTS = ("../shared/corpus", "../shared/external", "fixtures")
RANK = re.compile(r"^(?P<run>.+)\.rank\d+\.(?P<ext>.+)$")


def inputs() -> list[tuple[str, list[str]]]:
    """(name of the output, input paths) for every file, then every rank group."""
    files = sorted(str(p) for root in ROOTS if Path(root).is_dir()
                   for p in Path(root).rglob("*") if p.is_file() and not p.name.startswith("README"))
    groups: dict[str, list[str]] = {}
    for f in files:
        m = RANK.match(Path(f).name)
        if m:
            groups.setdefault(str(Path(f).parent / f"{m['run']}.ranks.{m['ext']}"), []).append(f)
    return [(f, [f]) for f in files] + [(g, ps) for g, ps in sorted(groups.items()) if len(ps) > 1]


def render_one(job: tuple[str, list[str], str, bool]) -> str:
    name, paths, out, html = job
    from diagnoser.errors import DiagnoserError
    from diagnoser.pipeline import diagnose
    from diagnoser.report.render import render_report
    stem = Path(out) / name.replace("../", "")
    stem.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = diagnose(paths)
            texts = {"md": render_report(report, "md", top=10), "json": render_report(report, "json")}
            if html:
                texts["html"] = render_report(report, "html")
        for fmt, text in texts.items():
            Path(f"{stem}.{fmt}").write_text(text)
        if caught:
            Path(f"{stem}.warnings").write_text("".join(f"{w.category.__name__}: {w.message}\n" for w in caught))
        return "ok"
    except DiagnoserError as e:
        Path(f"{stem}.err").write_text(f"{e}\n")
        return "error"
    except Exception as e:  # noqa: BLE001 - recorded, so a crash differs visibly between versions
        Path(f"{stem}.crash").write_text(f"{type(e).__name__}: {e}\n")
        return "crash"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shard", default="0/1", help="I/N: render every Nth input from the Ith (run N at once)")
    ap.add_argument("--html", action="store_true")
    args = ap.parse_args(argv)
    i, n = (int(x) for x in args.shard.split("/"))
    jobs = [(name, paths, args.out, args.html) for name, paths in inputs()][i::n]
    counts: dict[str, int] = {}
    for job in jobs:
        result = render_one(job)
        counts[result] = counts.get(result, 0) + 1
    print(f"{len(jobs)} inputs -> {args.out}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
