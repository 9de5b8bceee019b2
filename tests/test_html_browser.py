"""The HTML report and the playbook handbook in a real browser (Debian's headless Chromium driven
by playwright): no console errors, nothing fetched, every finding title visible, the SVG charts
drawn with a size, light/dark/print screenshots saved in the test's tmp_path.

Skips cleanly where /usr/bin/chromium or the playwright package is absent (.ci/run installs both).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.playbook import render_playbook_html
from diagnoser.report.render import render_html

from test_html_report import CHART_KEYS, synthetic_report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with sync_api.sync_playwright() as p:
        # launch() gives every browser a fresh temporary user-data-dir (playwright refuses
        # --user-data-dir in args; launch_persistent_context is the only way to pick one)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        yield browser
        browser.close()


class Opened:
    """A page on a local file, recording console errors, page errors, dialogs and every request."""

    def __init__(self, browser, path: Path, color_scheme: str = "light"):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=color_scheme)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.errors.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri(), wait_until="load")

    def shot(self, path: Path, **kwargs) -> Path:
        self.page.screenshot(path=str(path), full_page=True, **kwargs)
        print(f"screenshot: {path}")
        return path

    def assert_clean(self):
        assert not self.errors, self.errors
        others = [u for u in self.requests if not u.startswith(("file:", "data:", "about:"))]
        assert not others, f"the page fetched {others}"

    def close(self):
        self.context.close()


def _write(tmp_path: Path, name: str, html: str) -> Path:
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")
    return path


def _assert_findings_visible(page, report):
    titles = page.locator("article.finding h3")
    assert titles.count() == len(report.findings)
    for i, finding in enumerate(report.findings):
        title = titles.nth(i)
        assert title.is_visible()
        assert title.inner_text() == finding.title


def _assert_charts_drawn(page, keys):
    for key in keys:
        svg = page.locator(f"#chart-{key} svg")
        assert svg.count() == 1, key
        box = svg.bounding_box()
        assert box and box["width"] > 200 and box["height"] > 40, (key, box)
        assert svg.locator("rect, circle, polyline").count() > 0, key


def test_synthetic_report_renders_cleanly_in_chromium(browser, tmp_path):
    report = synthetic_report()
    path = _write(tmp_path, "report.html", render_html(report))
    opened = Opened(browser, path)
    try:
        page = opened.page
        _assert_findings_visible(page, report)
        _assert_charts_drawn(page, CHART_KEYS)
        # markup in a kernel name and a message is text: no script ran, no element was injected
        assert page.evaluate("document.scripts.length") == 0
        subject = page.locator("#finding-2 .subject code")
        assert subject.inner_text() == report.findings[1].subject.name
        assert "<script>alert('x')</script>" in page.locator("#finding-2 .message").inner_text()
        # severity is shown in colour: critical and warning borders differ
        colours = page.evaluate("""() => ['#finding-1', '#finding-2', '#finding-3'].map(
            s => getComputedStyle(document.querySelector(s)).borderLeftColor)""")
        assert len(set(colours)) == 3, colours
        opened.shot(tmp_path / "report.png")
        opened.assert_clean()
    finally:
        opened.close()


def test_report_has_dark_mode_and_a_print_layout(browser, tmp_path):
    path = _write(tmp_path, "report.html", render_html(synthetic_report()))
    dark = Opened(browser, path, color_scheme="dark")
    light = Opened(browser, path, color_scheme="light")
    try:
        def background(o):
            return o.page.evaluate("getComputedStyle(document.body).backgroundColor")

        assert background(dark) != background(light)
        dark.shot(tmp_path / "report-dark.png")
        light.page.emulate_media(media="print")
        assert not light.page.locator(".masthead nav").is_visible()
        light.shot(tmp_path / "report-print.png")
        pdf = tmp_path / "report.pdf"
        light.page.pdf(path=str(pdf), format="A4")
        assert pdf.stat().st_size > 10_000
        dark.assert_clean()
        light.assert_clean()
    finally:
        dark.close()
        light.close()


def test_report_and_handbook_fit_a_phone_screen(browser, tmp_path):
    """Wide tables, code and charts scroll inside their boxes; the page itself never scrolls sideways."""
    pages = {"report.html": render_html(synthetic_report()), "playbooks.html": render_playbook_html(load_pack())}
    for name, html in pages.items():
        context = browser.new_context(viewport={"width": 420, "height": 900})
        try:
            page = context.new_page()
            page.goto(_write(tmp_path, name, html).as_uri())
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 420, f"{name} is {width}px wide on a 420px screen"
            if name == "report.html":
                page.screenshot(path=str(tmp_path / "report-phone.png"), full_page=True)
                print(f"screenshot: {tmp_path / 'report-phone.png'}")
        finally:
            context.close()


@pytest.mark.parametrize("inputs, charts", [
    (["torch/host_sync.pt.trace.json.gz"], ["steps", "kernel_categories"]),
    (["ncu/small_kernels.ncu-rep.gz"], ["kernel_sol"]),
    (["mem/small_leak.snapshot.pickle.gz"], ["memory_composition", "memory_timeline"]),
], ids=["torch-host_sync", "ncu-small_kernels", "mem-small_leak"])
def test_real_report_renders_cleanly_in_chromium(browser, tmp_path, inputs, charts):
    report = diagnose([str(FIXTURES / p) for p in inputs])
    path = _write(tmp_path, "report.html", render_html(report))
    opened = Opened(browser, path)
    try:
        assert report.findings, "the workload should produce findings"
        _assert_findings_visible(opened.page, report)
        _assert_charts_drawn(opened.page, charts)
        opened.shot(tmp_path / "report.png")
        opened.assert_clean()
    finally:
        opened.close()


def test_playbook_handbook_renders_cleanly_in_chromium(browser, tmp_path):
    pack = load_pack()
    path = _write(tmp_path, "playbooks.html", render_playbook_html(pack))
    opened = Opened(browser, path)
    try:
        page = opened.page
        cards = page.locator("article.rule-card")
        assert cards.count() == len(pack.rules)
        for rid in pack.rules:
            heading = page.locator(f"#{rid.lower()} h3")
            assert heading.is_visible() and heading.inner_text().startswith(rid)
        # the table of contents links land on the rules
        first = pack.ordered()[0]
        page.locator(f'.toc a[href="#{first.playbook_anchor}"]').click()
        assert page.evaluate("location.hash") == f"#{first.playbook_anchor}"
        opened.shot(tmp_path / "playbooks.png")
        opened.assert_clean()
    finally:
        opened.close()
