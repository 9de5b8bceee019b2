"""Host work that is not input (issue 21; tools/gen/host_work_mechanisms.py, fixtures `h_*`, fixtures/README.md
"Host work that is not input"): real H200 runs whose GPU idles while the host computes on results it
has just read back - box decoding and NMS in NumPy, per-tag metrics in NumPy, upsampling and arg-max
of CPU tensors. Decided from what the host is seen doing in the gap after the read-back (CPU operators
and Python frames that launch nothing, with_stack=True), never from names of the scripts."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

_CACHE: dict = {}


def report_of(fixtures_dir, rel):
    if rel not in _CACHE:
        _CACHE[rel] = diagnose([str(fixtures_dir / rel)])
    return _CACHE[rel]


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def facts(report) -> dict:
    return {f.name: f.value for f in report.facts if f.subject is None}


def test_numpy_nms_after_the_read_back_is_host_compute_not_a_sync(fixtures_dir):
    # detector on 8 x 512^2, the head output copied back, boxes decoded and greedy NMS in NumPy per image:
    # 95% of the 71 ms request the GPU idles after the one read-back; the host is in np_nms (62 ms) and
    # np_decode; blocked in the copy itself for 0.1 ms (it was host_sync: INFER013 at 94.5% idle after a sync)
    report = report_of(fixtures_dir, "torch/h_infer_detect_numpy_nms.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] == pytest.approx(94.5, abs=2) and f["idle_sync_pct"] < 1
    assert f["idle_host_optimizer_pct"] == pytest.approx(0, abs=0.1)
    first = serious(report)[0]
    assert (first.rule, first.category) == ("INFER018", "host_compute")
    assert "np_nms" in f["host_gap_python"].split(",")[0]
    assert not any(x.category in ("host_sync", "input_pipeline") for x in serious(report))


def test_numpy_metrics_every_step_is_host_compute_in_training(fixtures_dir):
    # 1-D conv tagger, batch 384: each step .cpu().numpy() of probabilities and labels, per-tag ROC-AUC / F1 /
    # confusion in NumPy over the last 8 batches: 37% of the 29 ms step the GPU idles while the host is in
    # np_metrics (9.6 ms); GPU busy 60% (it was TRAIN016 host_sync, 38% idle after a sync)
    report = report_of(fixtures_dir, "torch/h_train_numpy_metrics.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] == pytest.approx(36.9, abs=2)
    first = serious(report)[0]
    assert (first.rule, first.category) == ("TRAIN019", "host_compute")
    assert first.estimated_gain == pytest.approx(0.369, abs=0.02)
    assert "np_metrics" in f["host_gap_python"].split(",")[0]
    assert "TRAIN018" not in {x.rule for x in report.findings}  # not the optimizer


def test_cpu_operators_on_copied_back_logits_are_not_input_work(fixtures_dir):
    # segmentation logits at 1/4 resolution copied back, upsampled / arg-maxed / counted by torch CPU ops:
    # the CPU operators without CUDA calls used to count as input preparation (INFER006 at 99%); the gap
    # begins at the read-back and ends in no input copy, so it is host work on the results
    report = report_of(fixtures_dir, "torch/h_infer_seg_cpu_upsample.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] > 95 and f["idle_data_pct"] < 1
    assert f["host_gap_ranges"].startswith("aten::argmax")
    assert serious(report)[0].category == "host_compute"
    assert "input_pipeline" not in {x.category for x in serious(report)}


# the nsys exports of the same workloads, made with -t cuda,nvtx,osrt --sample=process-tree
# --cpuctxsw=process-tree (tools/gen/run_host_osrt.sh; trimmed by tools/gen/trim_nsys_host.py to the launching
# thread's samples and context switches, leaf frames only): (rule, torch's idle after the read-back, nsys's,
# the module most sampled in the gaps)
NSYS_PAIRS = {
    "h_infer_detect_numpy_nms": ("INFER018", 94.5, 95.6, "_multiarray_umath"),
    "h_train_numpy_metrics": ("TRAIN019", 36.9, 28.3, "_multiarray_umath"),
    "h_infer_seg_cpu_upsample": ("INFER018", 99.1, 99.3, "libtorch_cpu"),
}


@pytest.mark.parametrize("name", sorted(NSYS_PAIRS))
def test_the_nsys_export_sees_the_host_computing_from_its_cpu_samples(fixtures_dir, name):
    """Without an op tree or stacks, the export shows the launching thread scheduled in and sampled running
    (outside any blocking OS call) through the gap after the read-back: host compute, as in the torch trace
    of the same code (the nsys export used to say host_sync: INFER013 / TRAIN016 with the idle "after the
    sync had returned"). The samples name what ran: NumPy's ufunc/sort loops, libtorch's CPU kernels."""
    rule, torch_pct, nsys_pct, module = NSYS_PAIRS[name]
    nsys = report_of(fixtures_dir, f"nsys/{name}.sqlite.gz")
    torch = report_of(fixtures_dir, f"torch/{name}.pt.trace.json.gz")
    fn, ft = facts(nsys), facts(torch)
    assert serious(nsys)[0].rule == serious(torch)[0].rule == rule
    assert fn["idle_host_after_sync_pct"] == pytest.approx(nsys_pct, abs=1)
    assert ft["idle_host_after_sync_pct"] == pytest.approx(torch_pct, abs=2)
    assert fn["idle_sync_pct"] < 1 and "idle_sync_quiet_pct" not in fn
    by_module = fn["host_gap_functions"].split("(by module ")[1]
    assert by_module.startswith(module), fn["host_gap_functions"]
    assert "CPU samples: " in serious(nsys)[0].message


def _plain_copy(src, dst):
    import gzip
    import shutil
    with gzip.open(src) as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return dst


def test_an_nsys_export_without_host_evidence_says_it_cannot_tell_and_how_to_record_it(fixtures_dir, tmp_path):
    """Synthetic, from the real segmentation export: its OS runtime, sample and scheduling tables dropped (as
    `nsys profile -t cuda,nvtx --sample=none` writes it). After the read-back the host makes no CUDA call for
    ~420 ms and nothing says whether it computes or waits: the idle stays with the sync that began it, and the
    report says so, with the command that records the host's side."""
    import sqlite3
    db = _plain_copy(fixtures_dir / "nsys/h_infer_seg_cpu_upsample.sqlite.gz", tmp_path / "seg_no_host.sqlite")
    c = sqlite3.connect(db)
    for t in ("OSRT_API", "OSRT_CALLCHAINS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS", "SCHED_EVENTS"):
        c.execute(f"DROP TABLE IF EXISTS {t}")
    c.commit()
    c.close()
    report = diagnose([str(db)])
    f = facts(report)
    first = serious(report)[0]
    assert first.category == "host_sync" and f["idle_sync_quiet_pct"] > 95 and f["sync_blocked_pct"] < 1
    assert "nothing recorded to say what it did" in first.message
    assert "nsys profile -t cuda,nvtx,osrt --sample=process-tree" in first.message
    assert "host_compute" not in {x.category for x in serious(report)}


def test_a_launching_thread_blocked_in_poll_waits_it_does_not_compute(fixtures_dir, tmp_path):
    """Synthetic, from the real segmentation export: one `poll` call added on the launching thread across the
    whole capture (as a host that waits on a socket or a pipe after each read-back). The thread is then in a
    blocking OS call for all of each gap: it waits, so the gap is not host compute; it stays with the sync,
    and the report names the call instead of saying it cannot tell."""
    import sqlite3
    db = _plain_copy(fixtures_dir / "nsys/h_infer_seg_cpu_upsample.sqlite.gz", tmp_path / "seg_poll.sqlite")
    c = sqlite3.connect(db)
    tid, lo, hi = c.execute("SELECT globalTid, min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                            "GROUP BY globalTid ORDER BY count(*) DESC LIMIT 1").fetchone()
    sid = c.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    c.execute("INSERT INTO StringIds (id, value) VALUES (?, 'poll')", (sid,))
    c.execute("INSERT INTO OSRT_API (start, end, eventClass, globalTid, nameId, returnValue, nestingLevel, "
              "callchainId) VALUES (?, ?, 27, ?, ?, 0, 0, 0)", (lo, hi, tid, sid))
    c.commit()
    c.close()
    report = diagnose([str(db)])
    f = facts(report)
    assert serious(report)[0].category == "host_sync"
    assert f["idle_host_pct"] < 1 and "idle_sync_quiet_pct" not in f
    assert f["host_wait_calls"].startswith("poll ") and "(100%)" in f["host_wait_calls"]
    assert "sits in poll" in serious(report)[0].message and "host_side_collect" not in f


def test_the_optimizer_twin_is_launch_bound_without_the_profiler_too(fixtures_dir):
    """t_train_gpu_adamw (the CPU-AdamW twin: fused AdamW on the GPU) read launch-bound under torch.profiler;
    its nsys export (no torch profiler, emit_nvtx ranges only) says the same: 125 kernels a step, GPU busy
    30%, launch gaps 50% of the 8 ms step. The finding is the workload's (a 38M-parameter MLP step is short
    on an H200), not profiler overhead; the host-compute cause of the twin is gone."""
    report = report_of(fixtures_dir, "nsys/t_train_gpu_adamw.sqlite.gz")
    f = facts(report)
    assert f["kernels_per_step"] == pytest.approx(125) and f["gpu_busy_pct"] == pytest.approx(30.5, abs=3)
    assert serious(report)[0].category == "launch_overhead"
    assert f["idle_host_pct"] < 10 and "host_compute" not in {x.category for x in serious(report)}


def test_a_host_table_with_text_where_integers_belong_is_a_one_line_error(fixtures_dir, tmp_path):
    """Synthetic (hostile), from the real detector export: text in OSRT_API.start, a real in
    SCHED_EVENTS.start: one line naming the file and the problem, exit 1, no traceback."""
    import sqlite3
    import subprocess
    import sys
    for table, value in (("OSRT_API", "'abc'"), ("SCHED_EVENTS", "1.5")):
        db = _plain_copy(fixtures_dir / "nsys/h_infer_detect_numpy_nms.sqlite.gz", tmp_path / f"bad_{table}.sqlite")
        c = sqlite3.connect(db)
        c.execute(f"UPDATE {table} SET start = {value} WHERE rowid = (SELECT min(rowid) FROM {table})")
        c.commit()
        c.close()
        r = subprocess.run([sys.executable, "-c", "from diagnoser.cli import main; main()", str(db)],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(db) in lines[0] and f"table {table} holds a value that is not an integer" in lines[0]
