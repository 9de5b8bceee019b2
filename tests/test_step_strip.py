"""One steady step as a timeline strip (issue 13): the series (diagnoser.timeline.strip) on real
traces, and its SVG (diagnoser.report.strip_chart) in the HTML report."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import analyse, diagnose, load_groups
from diagnoser.report.render import render_html
from diagnoser.report.strip_chart import LEFT, RIGHT, WIDTH, step_strip_chart
from diagnoser.timeline.strip import LANE_COLUMNS, STRIP_MAX_RECTS


def _charts(*paths):
    [g] = load_groups(list(paths))
    return analyse(g).charts


def _step_row(charts, strip):
    return next(r for r in charts["steps"] if r["step"] == strip["step"])


@pytest.mark.parametrize("path", ["fixtures/nsys/host_sync.sqlite.gz", "fixtures/torch/host_sync.pt.trace.json.gz",
                                  "fixtures/nsys/dataloader_bound.sqlite.gz", "fixtures/torch/launch_bound.pt.trace.json.gz"])
def test_strip_draws_the_steps_own_busy_and_idle(path):
    """The idle band adds up to the step's idle time in the steps chart (every gap counts, also those too
    short to draw), and the lanes' busy shares to its busy time."""
    charts = _charts(path)
    [strip] = charts["step_strip"]
    row = _step_row(charts, strip)
    idle_share = sum(f for f, _ in strip["idle_columns"]) / len(strip["idle_columns"])
    assert idle_share == pytest.approx(sum(row["idle_ms_by_class"].values()) / row["dur_ms"], abs=0.02)
    assert strip["dur_us"] == pytest.approx(row["dur_ms"] * 1e3, rel=1e-6)
    top_lane = max(lane["busy_pct"] for lane in strip["lanes"])
    assert top_lane <= 100 * row["busy_ms"] / row["dur_ms"] + 1
    for lane in strip["lanes"]:
        assert len(lane.get("rects", [])) <= STRIP_MAX_RECTS
        assert "rects" in lane or len(lane["columns"]) == LANE_COLUMNS


def test_launch_bound_step_never_draws_a_solid_busy_bar():
    """Thousands of tiny kernels with gaps between them: the lane is columns of their busy share."""
    [strip] = _charts("fixtures/nsys/host_sync.sqlite.gz")["step_strip"]
    lane = strip["lanes"][0]
    assert "columns" in lane
    assert sum(f for f, _ in lane["columns"]) / LANE_COLUMNS == pytest.approx(lane["busy_pct"] / 100, abs=0.02)


def test_host_row_names_what_held_the_gpu_up():
    """The DataLoader-bound export: the longest gap is waiting for data, under the `data` NVTX range;
    the per-layer .item() trace: its sync gaps are under the stream syncs."""
    [strip] = _charts("fixtures/nsys/dataloader_bound.sqlite.gz")["step_strip"]
    a, b, label, kind, cls = max(strip["host"], key=lambda h: h[1] - h[0])
    assert (label, kind, cls) == ("data", "annotation", "data") and (b - a) > 0.8 * strip["dur_us"]
    [strip] = _charts("fixtures/torch/host_sync.pt.trace.json.gz")["step_strip"]
    syncs = [h for h in strip["host"] if h[4] == "sync"]
    assert syncs and all(h[2] == "cudaStreamSynchronize" and h[3] == "api" for h in syncs)


def test_ranks_of_a_run_stack_the_same_step():
    charts = _charts("fixtures/torch/ddp_straggler.rank0.pt.trace.json.gz", "fixtures/torch/ddp_straggler.rank1.pt.trace.json.gz")
    strips = charts["step_strip"]
    assert [s["rank"] for s in strips] == [charts["source"]["rank"], 1 - charts["source"]["rank"]]
    assert strips[0]["step"] == strips[1]["step"]
    # the straggler's peer waits in NCCL: its idle is communication
    waiting = next(s for s in strips if s["rank"] != 1)
    comm = sum(f for f, c in waiting["idle_columns"] if c == "communication") / len(waiting["idle_columns"])
    assert comm > 0.4


def test_strip_is_scaled_to_its_step_long_or_short():
    """A 140 ms DataLoader step and a 2-ms-scale strip both fill the plot width."""
    long_ = _charts("fixtures/nsys/dataloader_bound.sqlite.gz")["step_strip"]
    short = [dict(long_[0], dur_us=2000.0, lanes=[{"stream": 7, "busy_pct": 50.0, "rects": [[0.0, 1000.0, "gemm"],
                                                                                       [1500.0, 2000.0, "gemm"]]}],
                  host=[], idle_columns=[[0.5, "launch"]] * 4)]  # synthetic: a 2 ms step
    for strips in (long_, short):
        chart = step_strip_chart(strips)
        right = max(r["x"] + r["w"] for r in chart.rects)
        assert right == pytest.approx(WIDTH - RIGHT, abs=1.0)
        assert min(r["x"] for r in chart.rects) >= LEFT - 0.1


def test_html_report_shows_the_strip_inline():
    html = render_html(diagnose(["fixtures/torch/host_sync.pt.trace.json.gz"]))
    assert "One steady step, as a timeline" in html
    i = html.index("One steady step, as a timeline")
    assert "<svg" in html[i:i + 20000]
