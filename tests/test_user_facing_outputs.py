"""What a new user met (issue 30): each defect of the reports as the user sees them, on real fixtures."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from diagnoser.api import diagnose
from diagnoser.cli import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
NAIVE_ATTENTION = FIX / "torch" / "naive_attention.pt.trace.json.gz"  # recorded with shapes: a per-op roofline
HOST_SYNC = FIX / "torch" / "host_sync.pt.trace.json.gz"  # a training step
DECODE = FIX / "torch" / "decode_small_batch.pt.trace.json.gz"  # inference


def test_roofline_chart_draws_its_roofs_as_svg_point_lists():
    page = diagnose(NAIVE_ATTENTION).to_html()
    chart = page[page.index('id="chart-roofline_chart"'):]
    chart = chart[:chart.index("</figure>")]
    roofs = re.findall(r'<polyline points="([^"]*)"', chart)
    assert roofs, "the roofline chart draws no roof"
    for points in roofs:
        pairs = [tuple(map(float, p.split(","))) for p in points.split()]
        assert len(pairs) == 3 and all(0 <= x <= 640 and 0 <= y <= 360 for x, y in pairs), points


def test_trace_with_shapes_does_not_ask_for_record_shapes():
    """The trace records shapes and the report prints a per-op roofline from them: KERN019 (a GEMM far
    below its compute roof) is decided (nothing to act on), not "not evaluated: collect with
    record_shapes=True", and in JUnit it is no skipped test."""
    report = diagnose(NAIVE_ATTENTION)
    md = report.to_markdown()
    assert "Per-op roofline" in md
    assert not [ne.rule for ne in report.not_evaluated if ne.rule in ("KERN019", "KERN020")]
    assert "record_shapes=True" not in md
    root = ET.fromstring(report.to_junit())
    kern = [c for c in root.iter("testcase") if c.get("name").startswith(("KERN019", "KERN020"))]
    assert kern and not [c for c in kern if c.find("skipped") is not None]
