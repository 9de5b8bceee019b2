"""Per-rank work in parallel (issue 15): the local process pool and a 2-worker Dask LocalCluster give
byte-identical reports to the sequential path on the real DDP traces; a corrupt rank trace is named
while the other ranks are diagnosed; the straggler injected into a SYNTHETIC 64-rank run (replicas
of the real ddp_straggler ranks, benchmarks/synthetic_ranks.py) is found."""
from __future__ import annotations

import gzip
import json
import logging
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.distributed import executing
from diagnoser.pipeline import diagnose, fact_blocks
from diagnoser.families.rank_files import rank_from_name
from diagnoser.ingest.expansion import expand_inputs
from diagnoser.report.render import render_html, render_json, render_markdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import synthetic_ranks  # noqa: E402

DDP_RUNS = ["ddp_healthy", "ddp_straggler", "x_ddp_comm_wait", "x_ddp_launch_bound", "x_ddp_overlap_control"]


def _reports(paths, **how) -> tuple[str, str, str]:
    with executing(**how):
        report = diagnose(paths)
    return render_markdown(report), render_json(report), render_html(report)


@pytest.fixture(scope="module")
def dask_scheduler():
    distributed = pytest.importorskip("dask.distributed", reason="Dask is the optional extra diagnoser[dask]")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster:
        yield cluster.scheduler_address


def _ddp_paths(fixtures_dir, run):
    return [str(fixtures_dir / "torch" / f"{run}.rank{r}.pt.trace.json.gz") for r in (0, 1)]


@pytest.mark.parametrize("run", DDP_RUNS)
def test_real_ddp_report_is_byte_identical_sequential_pool_and_dask(fixtures_dir, dask_scheduler, run):
    paths = _ddp_paths(fixtures_dir, run)
    sequential = _reports(paths, jobs=1)
    assert _reports(paths, jobs=2) == sequential
    assert _reports(paths, scheduler=dask_scheduler) == sequential


def test_real_ddp_directory_is_discovered_and_diagnosed_like_its_files(fixtures_dir, tmp_path):
    for p in _ddp_paths(fixtures_dir, "ddp_straggler"):
        (tmp_path / Path(p).name).write_bytes(Path(p).read_bytes())
    (tmp_path / "notes.txt").write_text("not a trace")
    found = expand_inputs([str(tmp_path)])
    assert [Path(p).name for p in found] == [f"ddp_straggler.rank{r}.pt.trace.json.gz" for r in (0, 1)]
    assert expand_inputs([str(tmp_path / "*.rank1.*")]) == [str(tmp_path / "ddp_straggler.rank1.pt.trace.json.gz")]
    first = diagnose([str(tmp_path)]).findings[0]
    assert (first.rule, first.subject.id) == ("TRAIN005", "1")


def _corrupt_copy(src: Path, dst: Path) -> None:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])  # a gzip stream cut in half: truncated


@pytest.mark.parametrize("how", ["pool", "dask"])
def test_corrupt_rank_is_named_and_the_other_ranks_still_diagnosed(tmp_path, how, request):
    # synthetic 4-rank run (replicas of the real ddp_straggler ranks); rank 2's file is cut in half
    synthetic_ranks.write_run(tmp_path, world=4, straggler_rank=3, small=True, ranks=[0, 1, 3])
    bad = tmp_path / "synthetic_ddp.rank2.pt.trace.json.gz"
    _corrupt_copy(tmp_path / "synthetic_ddp.rank1.pt.trace.json.gz", bad)
    args = [str(tmp_path), "--format", "json", "--no-progress"]
    args += ["--jobs", "2"] if how == "pool" else ["--scheduler", request.getfixturevalue("dask_scheduler")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    named = [n for n in report["notes"] if str(bad) in n]
    assert named and named[0].startswith(f"rank 2 ({bad}) could not be diagnosed:") and "truncated" in named[0]
    assert any("missing rank(s) 2" in n for n in report["notes"])
    first = report["findings"][0]
    assert (first["rule"], first["subject"]["id"]) == ("TRAIN005", "3")


def test_a_lone_corrupt_trace_is_still_an_error(fixtures_dir, tmp_path):
    bad = tmp_path / "bad.pt.trace.json.gz"
    _corrupt_copy(fixtures_dir / "torch" / "x_ddp_comm_wait.rank0.pt.trace.json.gz", bad)
    result = CliRunner().invoke(cli, [str(bad), "--jobs", "2"])
    assert result.exit_code == 1
    assert str(bad) in result.output and "Traceback" not in result.output


def test_ranks_come_from_file_names_when_traces_lack_distributed_info(tmp_path):
    for p in synthetic_ranks.write_run(tmp_path, world=2, straggler_rank=1, small=True, gz=False):
        trace = json.loads(p.read_text())
        del trace["distributedInfo"]
        p.write_text(json.dumps(trace))
    assert rank_from_name("run_rank_12.json") == 12 and rank_from_name("ddp.rank3.pt.trace.json.gz") == 3
    assert rank_from_name("trace.12.json") is None
    report = diagnose([str(tmp_path / "*.json")])
    assert any("ranks are taken from their file names" in n for n in report.notes)
    first = report.findings[0]
    assert (first.rule, first.subject.id) == ("TRAIN005", "1")


def test_injected_straggler_found_among_64_synthetic_ranks(tmp_path):
    synthetic_ranks.write_run(tmp_path, world=64, straggler_rank=41, seed=7, small=True)
    with executing(jobs=2):
        report = diagnose([str(tmp_path)])
    first = report.findings[0]
    assert (first.rule, first.subject.id) == ("TRAIN005", "41")
    facts = {f.name: f.value for f in report.facts if f.subject is None}
    assert facts["world_size"] == 64 and facts["straggler_rank"] == "41"
    assert facts["straggler_cost_pct"] > 50  # the real straggler's 60 ms host stall in an ~89 ms step
    assert not any("missing rank" in n for n in report.notes)


def test_many_rank_report_groups_a_slow_node_and_draws_ranks_sorted(tmp_path):
    # synthetic 20-rank run whose ranks 13-15 (one slow node) all straggle; above 16 ranks the HTML
    # draws thin sorted columns
    synthetic_ranks.write_run(tmp_path, world=20, straggler_rank=(13, 14, 15), seed=3, small=True)
    report = diagnose([str(tmp_path)])
    groups = report.charts["rank_groups"]
    assert [g["ranks"] for g in groups] == ["13-15", "0-12, 16-19"] and groups[0]["straggler"]
    note = next(n for n in report.notes if n.startswith("20 ranks in 2 groups"))
    assert "The other 17 ranks wait" in note and "longer in NCCL than ranks 13-15" in note
    top = report.charts["collectives"][0]
    assert top["collective"].startswith("AllReduce") and top["last_rank"] in (13, 14, 15)
    assert top["wait_ms"] > top["transfer_ms"] and top["process_group"].startswith("default_pg")
    html = render_html(report)
    ranks = html[html.index('id="chart-ranks"'):]
    ranks = ranks[:ranks.index("</figure>")]
    assert "20 ranks, sorted" in ranks and ranks.count("<rect") >= 20
    order = [int(m) for m in re.findall(r"<title>rank (\d+)[ :(]", ranks)]
    assert set(order[:6]) == {13, 14, 15}  # the three late ranks stand first (two rects each)
    assert 'id="chart-rank_groups"' in html and 'id="chart-collectives"' in html


def test_progress_names_each_rank_on_stderr(fixtures_dir):
    result = CliRunner().invoke(cli, _ddp_paths(fixtures_dir, "x_ddp_comm_wait") + ["--progress", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 2 and lines[0].startswith("[1/2] x_ddp_comm_wait.rank0") and "MB/s" in lines[0]


def test_traces_at_an_fsspec_url_are_fetched_where_they_are_measured(fixtures_dir):
    fsspec = pytest.importorskip("fsspec", reason="URLs need the optional extra diagnoser[dask]")
    fs = fsspec.filesystem("memory")
    for p in _ddp_paths(fixtures_dir, "ddp_straggler"):
        fs.pipe(f"/issue15/{Path(p).name}", Path(p).read_bytes())
    try:
        found = expand_inputs(["memory://issue15/"])
        assert [Path(u).name for u in found] == [f"ddp_straggler.rank{r}.pt.trace.json.gz" for r in (0, 1)]
        report = diagnose(found)
        first = report.findings[0]
        assert (first.rule, first.subject.id) == ("TRAIN005", "1")
        assert [i["path"] for i in report.inputs] == found
    finally:
        fs.rm("/issue15", recursive=True)


def test_a_folder_of_several_runs_keeps_each_run_apart(fixtures_dir, tmp_path):
    for run in ("ddp_straggler", "x_ddp_comm_wait"):
        for p in _ddp_paths(fixtures_dir, run):
            (tmp_path / Path(p).name).write_bytes(Path(p).read_bytes())
    blocks = fact_blocks([str(tmp_path)])  # as `diagnose facts` shows them
    inputs, facts = [i for b, _ in blocks for i in b], [f for _, fs in blocks for f in fs]
    assert len(inputs) == 4
    worlds = [f for f in facts if f.name == "world_size"]
    assert [w.value for w in worlds] == [2, 2]  # two 2-rank runs, not one of four traces
    stragglers = {f.source.split(",")[0].split("/")[-1]: f.value for f in facts if f.name == "straggler_rank"}
    assert sorted(stragglers) == ["ddp_straggler.rank0.pt.trace.json.gz", "x_ddp_comm_wait.rank0.pt.trace.json.gz"]
    assert stragglers["ddp_straggler.rank0.pt.trace.json.gz"] == "1"


def test_a_malformed_scheduler_address_is_one_line(fixtures_dir):
    result = CliRunner().invoke(cli, _ddp_paths(fixtures_dir, "x_ddp_comm_wait") + ["--scheduler", "foo"])
    assert result.exit_code == 1
    assert "scheduler address 'foo': expected tcp://HOST:PORT" in result.output and "Traceback" not in result.output


def test_a_rank_outside_its_world_is_named_and_the_others_diagnosed(tmp_path):
    paths = synthetic_ranks.write_run(tmp_path, world=4, straggler_rank=3, small=True, gz=False)
    trace = json.loads(paths[2].read_text())
    trace["distributedInfo"]["rank"] = 9  # synthetic corruption: rank 9 of a 4-rank world
    paths[2].write_text(json.dumps(trace))
    report = diagnose([str(tmp_path)])
    assert any(n.startswith(f"rank 2 ({paths[2]}) could not be diagnosed: distributedInfo.rank 9") for n in report.notes)
    first = report.findings[0]
    assert (first.rule, first.subject.id) == ("TRAIN005", "3")


def test_collective_names_rank_ranges_and_dask_resources_parse(monkeypatch):
    from diagnoser.timeline.rank_scale import collective_name, rank_ranges
    from diagnoser.distributed import _resources
    from diagnoser.errors import DiagnoserError
    assert collective_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        "AllReduce_Sum_f32_RING_LL"
    assert collective_name("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)") == "AllGather_RING_LL_Sum_int8_t"
    assert rank_ranges([5, 0, 1, 2, 7, 8, 3]) == "0-3, 5, 7-8"
    monkeypatch.setenv("DIAGNOSER_DASK_RESOURCES", "trace=1, memory=4e9")
    assert _resources() == {"trace": 1.0, "memory": 4e9}
    monkeypatch.setenv("DIAGNOSER_DASK_RESOURCES", "trace")
    with pytest.raises(DiagnoserError, match="NAME=AMOUNT"):
        _resources()
