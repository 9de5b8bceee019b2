"""Several separate runs in one report (issue 11): each run's tables and charts stand in its own
section, beside its own findings, in Markdown, HTML and JSON; a single run renders as before.

Real fixtures, three unrelated runs: a torch trace with host syncs (fixtures/torch/host_sync), an
Nsight Systems export of FP32 matmuls (fixtures/nsys/fp32_matmul) and an Nsight Compute report of
convolution kernels (fixtures/ncu/k_conv). Each section must show what that file alone shows.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.html import report_view
from diagnoser.report.render import render_html, render_json, render_markdown
from test_html_report import check_html

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

RUN_FILES = [FIXTURES / "torch" / "host_sync.pt.trace.json.gz", FIXTURES / "nsys" / "fp32_matmul.sqlite.gz",
             FIXTURES / "ncu" / "k_conv.raw.csv.gz"]
TIMELINE_RUNS = (1, 2)  # the torch trace and the nsys export have steps and top kernels; the ncu report has not


@pytest.fixture(scope="module")
def reports():
    pack = load_pack()
    together = diagnose([str(p) for p in RUN_FILES], pack=pack)
    alone = [diagnose([str(p)], pack=pack) for p in RUN_FILES]
    return together, alone


def _md_sections(text: str) -> dict[int, str]:
    """Run number -> the Markdown of its `## Run N:` section (up to the next `## ` heading)."""
    parts = re.split(r"^## Run (\d+): .*$", text, flags=re.M)
    out = {}
    for n, body in zip(parts[1::2], parts[2::2]):
        out[int(n)] = re.split(r"^## ", body, flags=re.M)[0]
    return out


def _md_table(text: str, title: str, level: str) -> str | None:
    """The caption and rows under the `title` table heading, None when the table is absent."""
    m = re.search(rf"^{level} {re.escape(title)}\n\n(.*?)(?=\n\n#|\n\n---|\Z)", text, flags=re.M | re.S)
    return m.group(1).strip() if m else None


ARTICLE_RULE = r'<article class="finding[^"]*" id="finding-\d+" data-rule="([A-Z]+\d{3})"'


def _html_sections(html: str) -> dict[int, str]:
    """Run number -> the HTML of its `<section class="block run">`."""
    starts = [(int(m.group(1)), m.start()) for m in re.finditer(r'<section class="block run" id="run-(\d+)">', html)]
    ends = [s for _, s in starts[1:]] + [html.index('id="notes"') if 'id="notes"' in html else len(html)]
    return {n: html[s:e] for (n, s), e in zip(starts, ends)}


def _top_kernel(table: str) -> str:
    first_row = [line for line in table.splitlines() if line.startswith("| `")][0]
    return first_row.split("|")[1].strip()


def test_separate_runs_report_is_split_into_one_section_per_run(reports):
    together, _ = reports
    assert [r["run"] for r in together.separate_runs] == [1, 2, 3]
    assert [r["inputs"] for r in together.separate_runs] == [[str(p)] for p in RUN_FILES]
    sections = _md_sections(render_markdown(together))
    assert sorted(sections) == [1, 2, 3]
    for n, body in sections.items():  # each run's findings sit in its own section
        rules = re.findall(r"^`([A-Z]+\d{3})` .* · run (\d+)", body, flags=re.M)
        assert rules, f"run {n} shows no finding"
        assert {int(run) for _, run in rules} == {n}
        expected = [f.rule for f in together.findings if f.run == n]
        assert [r for r, _ in rules] == expected


def test_each_markdown_section_shows_its_own_top_kernels_and_ops_as_that_file_alone(reports):
    together, alone = reports
    sections = _md_sections(render_markdown(together))
    tops = []
    for n in TIMELINE_RUNS:
        single = render_markdown(alone[n - 1])
        own = _md_table(single, "Top kernels per step", "##")
        assert own is not None and f"From {RUN_FILES[n - 1]}." in own
        assert _md_table(sections[n], "Top kernels per step", "###") == own
        assert _md_table(sections[n], "Top ops by GPU time", "###") == _md_table(single, "Top ops by GPU time", "##")
        tops.append(_top_kernel(own))
    assert tops[0] != tops[1]  # two unrelated runs: a section showing the first run's table would fail above
    steps = {}
    for n in TIMELINE_RUNS:  # each section's first line gives its own median step, as that file alone measures it
        alone_p50 = next(f.value for f in alone[n - 1].facts if f.name == "step_time_ms_p50" and f.subject is None)
        m = re.search(r"^Measured: step time ([\d.,]+) ms \(median\)", sections[n], flags=re.M)
        assert m and float(m.group(1).replace(",", "")) == pytest.approx(alone_p50, rel=0.005)
        steps[n] = alone_p50
    assert abs(steps[1] - steps[2]) > 0.05 * max(steps.values())
    assert re.search(r"^Measured: kernel GPU time .* kernel launches\.$", sections[3], flags=re.M)
    assert "Top kernels per step" not in sections[3]  # an ncu report has no steps: no table borrowed from run 1


def test_each_html_section_draws_its_own_step_chart_top_kernels_and_sol_scatter(reports):
    together, alone = reports
    html = render_html(together)
    checker = check_html(html)  # balanced, and every id unique across the run sections
    view = report_view(together)
    assert [r["run"] for r in view["runs"]] == [1, 2, 3]
    for part, single in zip(view["runs"], alone):
        mine = [(c.key, c.title, c.caption, c.rects, c.circles, c.table) for c in part["charts"]]
        theirs = [(c.key, c.title, c.caption, c.rects, c.circles, c.table) for c in report_view(single)["charts"]]
        assert mine == theirs and mine, f"run {part['run']}"
        for c in part["charts"]:
            assert f"chart-{c.key}-run{part['run']}" in checker.ids
        assert {v.f.run for v in part["findings"]} == {part["run"]}
    keys = {part["run"]: [c.key for c in part["charts"]] for part in view["runs"]}
    assert "steps" in keys[1] and "steps" in keys[2] and "steps" not in keys[3]
    assert keys[3] == ["kernel_sol"] and "kernel_sol" not in keys[1] + keys[2]
    for n, body in _html_sections(html).items():  # each section holds its own findings' articles
        assert set(re.findall(ARTICLE_RULE, body)) == {f.rule for f in together.findings if f.run == n}
        assert (f'id="chart-top_kernels-run{n}"' in body) == (n in TIMELINE_RUNS)


def test_step_charts_carry_each_runs_own_step_time(reports):
    together, alone = reports
    medians = {}
    for n in TIMELINE_RUNS:
        steps = together.separate_runs[n - 1]["charts"]["steps"]
        assert steps == alone[n - 1].charts["steps"]
        medians[n] = statistics.median(s["dur_ms"] for s in steps)
        chart = next(c for c in report_view(together)["runs"][n - 1]["charts"] if c.key == "steps")
        assert f"From {RUN_FILES[n - 1]}" in chart.caption
    assert abs(medians[1] - medians[2]) > 0.05 * max(medians.values())  # the two runs' steps differ


def test_json_runs_carry_their_own_charts_and_counts(reports):
    together, alone = reports
    doc = json.loads(render_json(together))
    assert [r["inputs"] for r in doc["runs"]] == [[str(p)] for p in RUN_FILES]
    for r, single in zip(doc["runs"], alone):
        assert r["charts"] == json.loads(json.dumps(single.charts))  # (compare's gate data is a table, not a chart)
        assert "host_gaps" not in r["charts"]
        mine = [f for f in doc["findings"] if f.get("run") == r["run"]]
        assert r["summary"] == {s: sum(1 for f in mine if f["severity"] == s) for s in ("critical", "warning", "info")}
        assert [f["rule"] for f in mine] == [f.rule for f in single.findings]
    assert doc["runs"][0]["charts"]["top_kernels"][0]["name"] != doc["runs"][1]["charts"]["top_kernels"][0]["name"]


def test_top_n_keeps_the_first_findings_of_each_run(reports):
    together, _ = reports
    sections = _md_sections(render_markdown(together, top=1))
    for n, body in sections.items():
        assert len(re.findall(r"^### \d+\. \[", body, flags=re.M)) == 1, f"run {n}"
    doc = json.loads(render_json(together, top=1))
    assert [f["run"] for f in doc["findings"]] == [1, 2, 3]
    assert len(doc["more_findings"]) == len(together.findings) - 3
    assert {f["run"] for f in doc["more_findings"]} <= {1, 2, 3}
    sections = _html_sections(render_html(together, top=1))
    assert {n: len(re.findall(ARTICLE_RULE, body)) for n, body in sections.items()} == {1: 1, 2: 1, 3: 1}


def test_a_single_run_report_has_no_run_sections(reports):
    _, alone = reports
    single = alone[0]
    assert single.separate_runs == []
    md = render_markdown(single)
    assert "## Run " not in md and "### " not in md and re.search(r"^## 1\. \[", md, flags=re.M)
    assert re.search(r"^## Top kernels per step$", md, flags=re.M)
    doc = json.loads(render_json(single))
    assert "runs" not in doc and all("run" not in f for f in doc["findings"])
    ids = check_html(render_html(single)).ids
    assert "chart-steps" in ids and "first-fix" in ids and not any(i.startswith("run-") for i in ids)


def test_rank_charts_of_a_distributed_run_stay_in_its_section():
    """A 2-rank DDP run (fixtures/torch/ddp_straggler) beside an unrelated Nsight Compute report."""
    ddp = [str(FIXTURES / "torch" / f"ddp_straggler.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    ncu = str(FIXTURES / "ncu" / "k_conv.raw.csv.gz")
    report = diagnose(ddp + [ncu])
    run_of = {tuple(r["inputs"]): r["run"] for r in report.separate_runs}
    assert set(run_of) == {tuple(ddp), (ncu,)}
    sections = _html_sections(render_html(report))
    n_ddp, n_ncu = run_of[tuple(ddp)], run_of[(ncu,)]
    assert f'id="chart-ranks-run{n_ddp}"' in sections[n_ddp] and f'id="chart-steps-run{n_ddp}"' in sections[n_ddp]
    assert "chart-ranks" not in sections[n_ncu] and "chart-steps" not in sections[n_ncu]
    assert f'id="chart-kernel_sol-run{n_ncu}"' in sections[n_ncu] and "chart-kernel_sol" not in sections[n_ddp]
    straggler = next(f for f in report.findings if f.run == n_ddp and f.subject is not None and f.subject.kind == "rank")
    assert f'data-subject-id="{straggler.subject.id}"' in sections[n_ddp]
