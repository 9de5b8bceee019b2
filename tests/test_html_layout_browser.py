"""The report and compare pages laid out in a real browser (Debian's headless Chromium via playwright)
at 1000 and 1400 px: no table wider than its box (nothing clipped behind a scroll bar), rule ids and
compare labels on one line, one colour per category across the charts, and on a DDP rank the stream
inside NCCL drawn as a wait, not as compute. Screenshots land in the test's tmp_path.

Real fixtures only (fixtures/, always in the repository). Skips where /usr/bin/chromium or playwright
is absent (.ci/run installs both).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnoser.comparison.core import compare_runs
from diagnoser.comparison.html import render_html as render_compare_html
from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.chart_palette import palette
from diagnoser.report.charts import build_charts
from diagnoser.report.render import render_html

from test_html_browser import browser  # noqa: F401 (the module's Chromium, launched once: a pytest fixture)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WIDTHS = (1000, 1400)
SHOT_MAX_PX = 8000
DDP = [FIXTURES / "torch/ddp_straggler.rank0.pt.trace.json.gz", FIXTURES / "torch/ddp_straggler.rank1.pt.trace.json.gz"]
REPORTS = {
    # per-kernel tables with many metric columns and long kernel names (clipped before issue 25)
    "ncu-k_cuda": [FIXTURES / "ncu/k_cuda.raw.csv.gz"],
    "ncu-c_train_mlp_top": [FIXTURES / "ncu/c_train_mlp_top.raw.csv.gz"],
    "torch-ddp_straggler": DDP,
    "torch-naive_attention": [FIXTURES / "torch/naive_attention.pt.trace.json.gz"],
    "torch-fp32_matmul": [FIXTURES / "torch/fp32_matmul.pt.trace.json.gz"],  # a long kernel name in the messages
}
COMPARES = {
    "torch-p_opt": ([FIXTURES / "torch/p_opt_single_tensor.pt.trace.json.gz"], [FIXTURES / "torch/p_opt_fused.pt.trace.json.gz"], {}),
    "ncu-launch0-vs-1": ([FIXTURES / "ncu/small_kernels.ncu-rep.gz"], [FIXTURES / "ncu/small_kernels.ncu-rep.gz"],
                         {"kernels": ["0"], "to_kernels": ["1"], "force": True}),
}

# every table fits its container; every rule id and compare label is one line; the page never
# scrolls sideways. Returns the problems found, as text.
LAYOUT_JS = """() => {
  const bad = [];
  const lines = el => {  // the height of the element's text (not of its table cell, as tall as its row), in lines
    const cs = getComputedStyle(el), lh = parseFloat(cs.lineHeight) || 1.55 * parseFloat(cs.fontSize);
    const range = document.createRange(); range.selectNodeContents(el);
    return range.getBoundingClientRect().height / lh; };
  for (const t of document.querySelectorAll('table')) {
    const box = t.parentElement, cs = getComputedStyle(box);
    const right = box.getBoundingClientRect().right - parseFloat(cs.paddingRight) - parseFloat(cs.borderRightWidth);
    const where = (t.closest('section, figure, article') || {}).id || t.className;
    if (t.getBoundingClientRect().right > right + 1 || box.scrollWidth > box.clientWidth + 1)
      bad.push(`table in ${where}: ${Math.round(t.getBoundingClientRect().width)}px in a ${box.clientWidth}px box`);
  }
  for (const c of document.querySelectorAll('code.rid')) if (lines(c) > 1.5) bad.push(`rule id wraps: ${c.textContent}`);
  for (const c of document.querySelectorAll('table.delta td:first-child'))
    if (lines(c) > 1.5) bad.push(`label wraps: ${c.textContent.slice(0, 60)}`);
  if (document.documentElement.scrollWidth > window.innerWidth) bad.push(`page ${document.documentElement.scrollWidth}px wide`);
  return bad;
}"""
LEGEND_JS = """() => Object.fromEntries([...document.querySelectorAll('.legend li')].map(li => {
  const s = li.querySelector('.swatch'); return [li.textContent.trim(), s ? getComputedStyle(s).backgroundColor : null]; }))"""




@pytest.fixture(scope="module")
def pack():
    return load_pack()


def _open(browser, path: Path, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri(), wait_until="load")
    return context, page, errors


def _check_layout(browser, tmp_path: Path, name: str, html: str) -> dict[int, dict]:
    path = tmp_path / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    legends = {}
    for width in WIDTHS:
        context, page, errors = _open(browser, path, width)
        try:
            shot = tmp_path / f"{name}-{width}.png"
            # the page's top SHOT_MAX_PX: Chromium refuses a full-page capture of a very tall page
            height = min(page.evaluate("document.documentElement.scrollHeight"), SHOT_MAX_PX)
            page.screenshot(path=str(shot), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})
            print(f"screenshot: {shot}")
            assert not errors, errors
            bad = page.evaluate(LAYOUT_JS)
            assert not bad, f"{name} at {width}px: {bad}"
            legends[width] = page.evaluate(LEGEND_JS)
        finally:
            context.close()
    return legends


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_page_layout_at_1000_and_1400px(browser, tmp_path, pack, name):
    report = diagnose([str(p) for p in REPORTS[name]], pack=pack)
    html = render_html(report)
    assert 'class="rid"' in html  # the rule ids the layout check measures
    _check_layout(browser, tmp_path, name, html)


@pytest.mark.parametrize("name", list(COMPARES))
def test_compare_page_layout_at_1000_and_1400px(browser, tmp_path, pack, name):
    before, after, kw = COMPARES[name]
    c = compare_runs([str(p) for p in before], [str(p) for p in after], pack, **kw)
    html = render_compare_html(c)
    assert 'class="rid"' in html and 'class="delta"' in html
    _check_layout(browser, tmp_path, f"compare-{name}", html)


def test_a_category_has_one_colour_in_the_report_and_the_compare_page(browser, tmp_path, pack):
    """The SOL chart of a report and the before -> after SOL chart of a compare page of the same
    Nsight Compute file: each category's legend swatch has the same computed colour on both."""
    ncu = FIXTURES / "ncu/small_kernels.ncu-rep.gz"
    report_legend = _check_layout(browser, tmp_path, "sol-report", render_html(diagnose([str(ncu)], pack=pack)))[1400]
    c = compare_runs([str(ncu)], [str(ncu)], pack)
    compare_legend = _check_layout(browser, tmp_path, "sol-compare", render_compare_html(c))[1400]
    shared = {k for k in report_legend if k in compare_legend and report_legend[k]}
    assert shared, (report_legend, compare_legend)
    for label in shared:
        assert report_legend[label] == compare_legend[label], label


def test_palette_gives_a_category_the_same_colour_in_any_order():
    """Synthetic orders: the single-run chart lists kernel categories first, the compare chart SOL only."""
    one = palette(["gemm", "elementwise", "other", "memory_bound", "compute_bound"])
    two = palette(["memory_bound"])
    three = palette(["compute_bound", "latency_bound", "memory_bound"])
    assert one["memory_bound"] == two["memory_bound"] == three["memory_bound"]
    assert one["compute_bound"] == three["compute_bound"] != one["memory_bound"]
    assert one["other"] == "p9"
    owners = palette(["activations", "weights", "optimizer state"])  # names with no fixed colour: distinct
    assert len(set(owners.values())) == 3


def test_ddp_rank_stream_in_nccl_is_drawn_as_a_wait(browser, tmp_path, pack):
    report = diagnose([str(p) for p in DDP], pack=pack)
    strip = next(c for c in build_charts(report.charts) if c.key == "step_strip")
    comm = [r for r in strip.rects if "communication kernels" in r.get("tip", "")]
    compute = [r for r in strip.rects if "kernels" in r.get("tip", "") and "communication" not in r.get("tip", "")]
    assert comm and compute, "the DDP step should show NCCL and compute kernels"
    assert {r["cls"] for r in comm} == {"s-wait"}
    assert "s-wait" not in {r["cls"] for r in compute}
    path = tmp_path / "ddp.html"
    path.write_text(render_html(report), encoding="utf-8")
    context, page, _ = _open(browser, path, 1400)
    try:
        fills = page.evaluate("""() => ['s-wait', 's-busy'].map(c =>
            getComputedStyle(document.querySelector('#chart-step_strip svg rect.' + c)).fill)""")
        assert fills[0] != fills[1], fills
        page.locator("#chart-step_strip").screenshot(path=str(tmp_path / "ddp-strip.png"))
        print(f"screenshot: {tmp_path / 'ddp-strip.png'}")
    finally:
        context.close()
