"""The HTML report: well-formed, self-contained, escaped, charts drawn from data, and for every
real workload of the corpus the right finding comes first.

`check_html` (a strict tag-balance checker on html.parser) and `synthetic_report` are shared
with test_playbook.py and test_html_browser.py.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.facts import Subject
from diagnoser.findings import Finding, NotEvaluated
from diagnoser.pipeline import Report, diagnose
from diagnoser.report import charts as charts_mod
from diagnoser.report.chart_geometry import nice_ticks
from diagnoser.report.render import render_html

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_LEAVES = {"rect", "line", "circle", "ellipse", "polyline", "polygon", "path", "stop", "use"}
URL_ATTRS_ALLOWED = {("a", "href")}


class StrictHTMLChecker(HTMLParser):
    """Flags unclosed, mismatched, stray and self-closed non-void tags; collects ids, links, text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, int]] = []
        self.errors: list[str] = []
        self.ids: Counter = Counter()
        self.tags: Counter = Counter()
        self.attrs: list[tuple[str, str, str]] = []  # (tag, attr, value)
        self.text: list[str] = []
        self.style: list[str] = []
        self.doctype = False

    def handle_decl(self, decl):
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def _open(self, tag, attrs):
        self.tags[tag] += 1
        for name, value in attrs:
            self.attrs.append((tag, name, value or ""))
            if name == "id":
                self.ids[value] += 1

    def handle_starttag(self, tag, attrs):
        self._open(tag, attrs)
        if tag == "title" and self.stack and self.stack[-1][0] == "head":
            self.tags["head>title"] += 1
        if tag not in VOID:
            self.stack.append((tag, self.getpos()[0]))

    def handle_startendtag(self, tag, attrs):
        self._open(tag, attrs)
        if tag not in VOID and tag not in SVG_LEAVES:
            self.errors.append(f"line {self.getpos()[0]}: <{tag}/> is not a void element")

    def handle_endtag(self, tag):
        line = self.getpos()[0]
        if tag in VOID:
            self.errors.append(f"line {line}: </{tag}> closes a void element")
        elif not self.stack:
            self.errors.append(f"line {line}: stray </{tag}>")
        elif self.stack[-1][0] != tag:
            self.errors.append(f"line {line}: </{tag}> closes <{self.stack[-1][0]}> opened on line {self.stack[-1][1]}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] == "style":
            self.style.append(data)
        else:
            self.text.append(data)

    def close(self):
        super().close()
        for tag, line in self.stack:
            self.errors.append(f"<{tag}> opened on line {line} is never closed")

    def attr_values(self, tag: str | None = None, name: str | None = None) -> list[str]:
        return [v for t, n, v in self.attrs if (tag is None or t == tag) and (name is None or n == name)]


def check_html(text: str) -> StrictHTMLChecker:
    """Parse `text` strictly; assert it is a balanced, self-contained document with unique ids."""
    checker = StrictHTMLChecker()
    checker.feed(text)
    checker.close()
    assert not checker.errors, "\n".join(checker.errors[:20])
    assert checker.doctype, "missing <!DOCTYPE html>"
    for tag in ("html", "head", "body", "head>title"):
        assert checker.tags[tag] == 1, f"expected exactly one <{tag}>"
    dupes = [i for i, n in checker.ids.items() if n > 1]
    assert not dupes, f"duplicate ids: {dupes}"
    for href in checker.attr_values(name="href"):
        if href.startswith("#"):
            assert href[1:] in checker.ids, f"internal link {href} has no target"
    assert_self_contained(checker)
    return checker


def assert_self_contained(checker: StrictHTMLChecker) -> None:
    """Nothing to fetch: no script/link/img/iframe, no src, no url(...) or @import in CSS; web
    addresses appear only as <a href> to documentation."""
    for tag in ("script", "link", "img", "iframe", "object", "embed", "video", "audio", "source"):
        assert checker.tags[tag] == 0, f"<{tag}> in a self-contained report"
    for tag, name, value in checker.attrs:
        assert name not in ("src", "srcset", "action", "formaction", "background", "poster"), (tag, name, value)
        assert not name.startswith("on"), f"event handler {name} on <{tag}>"
        if (tag, name) in URL_ATTRS_ALLOWED:
            assert re.match(r"^(#|https?://|mailto:|[\w./-])", value), f"unexpected href {value!r}"
        else:
            assert "://" not in value, f"<{tag} {name}={value!r}> points outside the file"
    css = "".join(checker.style)
    assert "@import" not in css and "url(" not in css, "CSS must not fetch anything"


def visible_text(checker: StrictHTMLChecker) -> str:
    return re.sub(r"\s+", " ", "".join(checker.text))


# ------------------------------------------------------------------------------ synthetic report

EVIL_KERNEL = "void f<int>(float*, int const&) [with T = <b>int</b>]"


def _finding(rule, category, severity, title, message, gain, subject=None, evidence=None, tree="train-slow"):
    return Finding(
        rule=rule, name=title.lower().replace(" ", "-")[:40], category=category, tree=tree, severity=severity,
        title=title, message=message, evidence=evidence or {"gpu_busy_pct": {"value": 21.4, "unit": "%"}},
        estimated_gain=gain, gain_of="step time" if tree != "kernel" else "GPU time", subject=subject,
        fix="Use `DataLoader(ds, num_workers=8)` <now>.", verify="Re-profile: gpu_busy_pct above 80%.",
        refs=("https://pytorch.org/docs/stable/data.html", "javascript:alert(1)"), sources=["trace.json (torch)"])


def synthetic_charts() -> dict:
    steps = []
    start = 0.0
    for i in range(12):
        idle = {"data": 30.0 + i, "sync": 4.0, "launch": 2.0, "communication": 0.0, "unexplained": 1.0}
        busy = 20.0 + (i % 3)
        dur = busy + sum(idle.values())
        steps.append({"step": f"ProfilerStep#{i + 2}", "start_ms": start, "dur_ms": dur, "busy_ms": busy,
                      "idle_ms_by_class": idle})
        start += dur
    return {
        "steps": steps,
        "kernel_categories": [{"category": "gemm", "time_ms": 120.0, "share_pct": 55.0},
                              {"category": "elementwise", "time_ms": 60.0, "share_pct": 27.5},
                              {"category": "other", "time_ms": 8.0, "share_pct": 3.7}],
        "kernel_sol": [
            {"id": "0", "name": "nvjet_tst_128x256", "sm_pct": 93.0, "mem_pct": 94.0, "time_share_pct": 40.0,
             "category": "near_speed_of_light"},
            {"id": "7", "name": EVIL_KERNEL, "sm_pct": 5.0, "mem_pct": 99.0, "time_share_pct": 10.0,
             "category": "memory_bound"},
            {"id": "3", "name": "tiny_grid", "sm_pct": 0.05, "mem_pct": 0.01, "time_share_pct": 0.1,
             "category": "latency_bound"}],
        "memory_composition": [{"owner": "activations", "bytes": 6 << 30, "share_pct": 60.0},
                               {"owner": "parameters", "bytes": 4 << 30, "share_pct": 40.0}],
        "memory_timeline": [{"t_ms": 10.0 * i, "allocated_bytes": (i % 40) * 200_000_000,
                             "reserved_bytes": (i % 40) * 200_000_000 + 1_000_000_000} for i in range(120)],
        "ranks": [{"rank": 0, "step_ms": 89.0, "busy_pct": 31.8, "comm_wait_ms": 75.7, "straggler": False},
                  {"rank": 1, "step_ms": 88.9, "busy_pct": 27.8, "comm_wait_ms": 3.2, "straggler": True}],
    }


def synthetic_report(charts: dict | None = None) -> Report:
    """Three findings (one per severity), one on a kernel whose name and message carry markup."""
    findings = [
        _finding("TRAIN001", "input_pipeline", "critical", "The GPU waits for the input pipeline",
                 "78% of each step the GPU idles while the host loads data (GPU busy 8%).", 0.78,
                 evidence={"gpu_busy_pct": {"value": 8.2, "unit": "%"}, "idle_data_pct": {"value": 78.1, "unit": "%"},
                           "step_time_ms_p50": {"value": 412.5, "unit": "ms"}}),
        _finding("KERN005", "shared_bank_conflicts", "warning", "Bank conflicts in <b>shared</b> memory",
                 "void f<int>(...) replays accesses <script>alert('x')</script> 1.05e9 times", 0.12,
                 subject=Subject("kernel", "7", EVIL_KERNEL), tree="kernel",
                 evidence={"shared_bank_conflicts_count": {"value": 1_047_552_000, "unit": "count"},
                           "launch_ids": {"value": "7,9,<i>11</i>", "unit": ""}}),
        _finding("TRAIN007", "pageable_memcpy", "info", "Copies from pageable host memory",
                 "12 MB per step copied from pageable memory.", 0.0),
    ]
    not_evaluated = [NotEvaluated("TRAIN005", "One rank arrives late", "train-slow", ("rank_straggler_cost_pct",),
                                  "profile every rank: `torch.profiler` on each <rank>")]
    return Report(inputs=[{"path": "runs/<b>trace</b>.pt.trace.json", "kind": "torch-trace"}], findings=findings,
                  not_evaluated=not_evaluated, charts=synthetic_charts() if charts is None else charts,
                  notes=["a note with <i>markup</i> & an ampersand"])


# ------------------------------------------------------------------------------ structure and escaping

def test_synthetic_report_is_well_formed_and_self_contained():
    html = render_html(synthetic_report())
    checker = check_html(html)
    text = visible_text(checker)
    assert html.index('id="summary"') < html.index('id="findings"') < html.index('id="measurements"')
    assert [a for a in checker.attr_values("article", "data-rule")] == ["TRAIN001", "KERN005", "TRAIN007"]
    assert "Fix this first" in text and "up to 78% of step time" in text


def test_kernel_names_and_messages_with_markup_render_as_text():
    """A C++ kernel name and a message carrying <script> are escaped, never interpreted."""
    report = synthetic_report()
    report.findings[1].fix = "Pad `f<int>`'s array; see [docs](https://evil.example/x) or <https://evil.example/y>."
    html = render_html(report)
    checker = check_html(html)  # a raw `<int>` or `<b>` would unbalance the tags
    assert checker.tags["script"] == 0 and checker.tags["i"] == 0 and checker.tags["b"] == 0
    assert "void f&lt;int&gt;(float*, int const&amp;) [with T = &lt;b&gt;int&lt;/b&gt;]" in html
    assert "&lt;script&gt;alert(" in html
    text = visible_text(checker)
    assert EVIL_KERNEL in text
    assert "void f<int>(...) replays accesses <script>alert('x')</script> 1.05e9 times" in text
    assert "Bank conflicts in <b>shared</b> memory" in text
    assert "runs/<b>trace</b>.pt.trace.json" in text and "a note with <i>markup</i> & an ampersand" in text
    # a dangerous reference is shown, not linked; a link in text built from trace data stays text
    assert "javascript:alert(1)" in text
    assert "see [docs](https://evil.example/x) or <https://evil.example/y>." in text
    assert not any("evil" in h for h in checker.attr_values(name="href"))
    assert not any(h.startswith("javascript") for h in checker.attr_values(name="href"))


def test_finding_shows_evidence_meaning_fix_and_verify_from_its_playbook():
    html = render_html(synthetic_report())
    text = visible_text(check_html(html))
    assert "Measured evidence" in text and "412.5 ms" in text and "1,047,552,000" in text
    assert "DataLoader(ds, num_workers=8)" in text and "<now>" in text
    assert "Re-profile: gpu_busy_pct above 80%." in text
    # KERN005 has a playbook section (playbooks/kernel.md): its Meaning and its Fix code block show
    from diagnoser.report.playbook import load_playbooks, sections_by_rule
    section = sections_by_rule(load_playbooks()).get("KERN005")
    if section is None:
        pytest.fail("playbooks/ has no KERN005 section")
    assert "Why it matters" in text
    first_words = " ".join(section.part("meaning").split()[:4]).replace("`", "")
    assert first_words in text
    assert '<pre><code' in html


def test_report_without_findings_or_charts_says_so():
    report = Report(inputs=[{"path": "x.sqlite", "kind": "nsys-sqlite"}], findings=[], not_evaluated=[], charts={})
    checker = check_html(render_html(report))
    text = visible_text(checker)
    assert "No rule fired on these inputs" in text
    assert checker.tags["svg"] == 0 and "measurements" not in checker.ids


def test_info_only_report_has_no_fix_first_banner():
    report = synthetic_report(charts={})
    report.findings = [f for f in report.findings if f.severity == "info"]
    text = visible_text(check_html(render_html(report)))
    assert "No warning or critical finding" in text and "Fix this first" not in text


# ------------------------------------------------------------------------------ charts

CHART_KEYS = ("steps", "ranks", "kernel_categories", "kernel_sol", "memory_composition", "memory_timeline")


def test_every_chart_is_drawn_inline_from_report_charts():
    checker = check_html(render_html(synthetic_report()))
    for key in CHART_KEYS:
        assert f"chart-{key}" in checker.ids, key
    assert checker.tags["svg"] == len(CHART_KEYS)
    assert checker.tags["rect"] > 12 and checker.tags["circle"] == 3 and checker.tags["polyline"] == 2


@pytest.mark.parametrize("missing", CHART_KEYS)
def test_each_chart_is_optional(missing):
    data = synthetic_charts()
    del data[missing]
    checker = check_html(render_html(synthetic_report(charts=data)))
    assert f"chart-{missing}" not in checker.ids
    assert checker.tags["svg"] == len(CHART_KEYS) - 1


def test_empty_or_malformed_chart_data_draws_nothing_and_does_not_fail():
    data = {"steps": [], "kernel_categories": None, "kernel_sol": [{"id": "1"}], "memory_timeline": [{"t_ms": 1}],
            "memory_composition": [{"owner": "x", "bytes": 0}], "ranks": [{"rank": 0}]}
    checker = check_html(render_html(synthetic_report(charts=data)))
    assert set(checker.ids) & {f"chart-{k}" for k in CHART_KEYS} == {"chart-kernel_sol"}
    bad = {"steps": [{"step": "s", "dur_ms": float("nan"), "busy_ms": None, "idle_ms_by_class": {"data": "x"}}]}
    check_html(render_html(synthetic_report(charts=bad)))


def test_step_columns_stack_busy_and_idle_classes_to_the_step_duration():
    data = synthetic_charts()["steps"]
    chart = charts_mod.steps_chart(data)
    first = [r for r in chart.rects if r["tip"].startswith("ProfilerStep#2:")]
    assert [r["cls"] for r in first] == ["s-busy", "i-data", "i-sync", "i-launch", "i-unexplained"]
    scale = first[0]["h"] / data[0]["busy_ms"]
    assert sum(r["h"] for r in first) == pytest.approx(data[0]["dur_ms"] * scale, abs=0.5)
    for upper, lower in zip(first[1:], first):  # stacked: each segment sits on the previous one
        assert upper["y"] + upper["h"] == pytest.approx(lower["y"], abs=0.11)
    assert [t["text"] for t in chart.texts if t["cls"] == "tick" and t["anchor"] == "middle"][:3] == ["2", "3", "4"]
    assert {i["label"] for i in chart.legend} >= {"GPU busy", "idle: waiting for data"}


def _inside(point, polygon):
    x, y = point
    pts = [tuple(map(float, p.split(","))) for p in polygon.split()]
    inside = False
    for (x1, y1), (x2, y2) in zip(pts, pts[1:] + pts[:1]):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside = not inside
    return inside


@pytest.mark.parametrize("sm, mem, region", [(90, 20, "r-compute"), (5, 99, "r-memory"), (30, 40, "r-latency"),
                                             (93, 80, "r-compute"), (70, 93, "r-memory")])
def test_sol_scatter_puts_kernels_in_the_right_region(sm, mem, region):
    chart = charts_mod.kernel_sol_chart([{"id": "1", "name": "k", "sm_pct": sm, "mem_pct": mem,
                                          "time_share_pct": 50.0, "category": "c"}])
    c = chart.circles[0]
    hits = [p["cls"] for p in chart.polygons if _inside((c["cx"], c["cy"]), p["points"])]
    assert hits == [region]


def test_sol_circle_area_follows_time_share():
    rows = [{"id": str(i), "name": "k", "sm_pct": 50, "mem_pct": 50, "time_share_pct": s, "category": "c"}
            for i, s in enumerate((64.0, 16.0))]
    big, small = sorted(charts_mod.kernel_sol_chart(rows).circles, key=lambda c: -c["r"])
    assert (big["r"] - 3) / (small["r"] - 3) == pytest.approx(2.0, rel=0.02)  # sqrt(64/16)


def test_memory_timeline_scales_bytes_to_gib_ticks():
    pts = [{"t_ms": 0.0, "allocated_bytes": 0, "reserved_bytes": 0},
           {"t_ms": 50.0, "allocated_bytes": 3 << 30, "reserved_bytes": 4 << 30}]
    chart = charts_mod.memory_timeline_chart(pts)
    ticks = [t["text"] for t in chart.texts if t["cls"] == "tick" and t["anchor"] == "end"]
    assert ticks == ["0", "1", "2", "3", "4"]
    top_tick_y = min(line["y1"] for line in chart.lines if line["cls"] == "grid")
    last = chart.polylines[0]["points"].split()[-1]  # reserved line ends at 4 GiB = the top tick
    assert float(last.split(",")[1]) == pytest.approx(top_tick_y, abs=0.11)


@pytest.mark.parametrize("hi, expected_top", [(7.3, 8), (0.42, 0.5), (1000, 1000), (101, 125), (0, 1)])
def test_nice_ticks_cover_the_data(hi, expected_top):
    ticks = nice_ticks(hi)
    assert ticks[0] == 0 and ticks[-1] == pytest.approx(expected_top) and ticks[-1] >= hi
    assert all(math.isfinite(t) for t in ticks)


# ------------------------------------------------------------------------------ real workloads

TIMELINE_FIRST = {
    "dataloader_bound": {"input_pipeline"},
    "host_sync": {"host_sync"},
    "launch_bound": {"launch_overhead"},
    "healthy": {None},
    "fp32_matmul": {"fp32_no_tensor_cores"},
    "naive_attention": {"unfused_attention"},
    "sdpa_attention": {None},
    "decode_small_batch": {"launch_overhead", "small_batch"},
}
MEMORY_FIRST = {"activations": "oom_activations", "optimizer": "oom_optimizer_state",
                "fragmentation": "oom_fragmentation", "small_leak": "oom_memory_leak"}
KERNEL_FIRST = {"0": None, "1": "fp32_no_tensor_cores", "2": "uncoalesced_access", "3": "small_grid",
                "4": "shared_bank_conflicts", "5": "warp_divergence"}


def _articles(checker: StrictHTMLChecker) -> list[dict]:
    out = []
    for tag, name, value in checker.attrs:
        if tag == "article" and name == "class":
            out.append({})
        if tag == "article" and name.startswith("data-"):
            out[-1][name[5:]] = value
    return out


def _first_problem(html: str):
    articles = [a for a in _articles(check_html(html)) if a["severity"] in ("critical", "warning")]
    return articles[0] if articles else None


def _cases():
    for name, expected in TIMELINE_FIRST.items():
        yield pytest.param([f"torch/{name}.pt.trace.json.gz"], expected, id=f"torch-{name}")
        yield pytest.param([f"nsys/{name}.sqlite.gz"], expected, id=f"nsys-{name}")
    for name, expected in MEMORY_FIRST.items():
        yield pytest.param([f"mem/{name}.snapshot.pickle.gz"], {expected}, id=f"mem-{name}")
    yield pytest.param([f"torch/ddp_healthy.rank{r}.pt.trace.json.gz" for r in (0, 1)], {None}, id="ddp-healthy")


@pytest.mark.parametrize("inputs, expected", list(_cases()))
def test_real_workload_report_shows_the_right_finding_first(inputs, expected):
    html = render_html(diagnose([str(FIXTURES / p) for p in inputs]))
    first = _first_problem(html)
    got = first["category"] if first else None
    assert got in expected, f"first warning-or-critical finding is {got}, expected one of {expected}"
    if got is None:
        assert "No warning or critical finding" in html or "No rule fired" in html
    else:
        assert html.index('id="first-fix"') < html.index('id="finding-1"')


def test_ddp_straggler_report_names_rank_1_first():
    html = render_html(diagnose([str(FIXTURES / f"torch/ddp_straggler.rank{r}.pt.trace.json.gz") for r in (0, 1)]))
    first = _first_problem(html)
    assert first and first["category"] == "straggler"
    assert (first.get("subject-kind"), first.get("subject-id")) == ("rank", "1")
    assert "chart-ranks" in check_html(html).ids


def test_small_kernels_report_ranks_each_kernel_by_its_own_problem():
    html = render_html(diagnose([str(FIXTURES / "ncu/small_kernels.ncu-rep.gz")]))
    articles = _articles(check_html(html))
    for kid, expected in KERNEL_FIRST.items():
        mine = [a for a in articles if a.get("subject-kind") == "kernel" and a.get("subject-id") == kid
                and a["severity"] in ("critical", "warning")]
        assert (mine[0]["category"] if mine else None) == expected, f"kernel {kid}"
    assert "chart-kernel_sol" in check_html(html).ids


def test_cli_writes_one_self_contained_html_file(tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, [str(FIXTURES / "torch/host_sync.pt.trace.json.gz"), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    checker = check_html(out.read_text(encoding="utf-8"))
    assert checker.tags["svg"] >= 1 and "finding-1" in checker.ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
