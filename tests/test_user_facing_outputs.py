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


FP32_MATMUL = FIX / "torch" / "fp32_matmul.pt.trace.json.gz"
HEALTHY = FIX / "torch" / "healthy.pt.trace.json.gz"
DDP_RANKS = [FIX / "torch" / f"x_ddp_comm_wait.rank{i}.pt.trace.json.gz" for i in (0, 1)]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def test_compare_html_says_n_a_for_a_kernel_one_side_lacks_never_none_ms():
    from diagnoser.api import compare
    page = compare(FP32_MATMUL, HEALTHY).to_html()
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    assert "n/a" in cells and not [c for c in cells if "None" in c or "nan" in c]


def test_compare_in_a_terminal_is_drawn_for_it_within_its_width():
    from diagnoser.api import compare
    from diagnoser.comparison.terminal import render_terminal
    c = compare(FP32_MATMUL, HEALTHY)
    text = ANSI.sub("", render_terminal(c.data, width=100))
    assert "Headline numbers" in text and "|---" not in text  # drawn, not raw Markdown
    assert max(len(line) for line in text.splitlines()) <= 100
    result = CliRunner().invoke(cli, ["compare", str(FP32_MATMUL), "--to", str(HEALTHY), "--format", "terminal"])
    assert result.exit_code == 0 and "\x1b[" in result.output


def test_per_op_roofline_in_a_100_column_terminal_wraps_between_words():
    from diagnoser.report.terminal import render_terminal
    from diagnoser.report.text_view import present
    report = diagnose(DDP_RANKS)
    text = ANSI.sub("", render_terminal(present(report.report, 10, "info"), width=100))
    table = text[text.index("Per-op roofline"):]
    table = table[:table.index("\n\n")]
    rows = table.splitlines()
    assert max(len(r) for r in text.splitlines()) <= 100
    cells = " ".join(rows)
    for op in ("aten::mm", "aten::addmm", "FLOP/byte"):  # names and headers whole, never "aten::addm / m"
        assert op in cells
    assert not [r for r in rows if re.match(r"^\S{1,3}\s{2,}", r) and not r.startswith(("op", "─"))], rows


def test_rules_list_fits_a_100_column_terminal_and_stays_one_line_per_rule_piped():
    from diagnoser.cli.rules import pack_of, rules_list_lines
    rules = pack_of().ordered()
    wrapped = rules_list_lines(rules, 100)
    assert max(map(len, wrapped)) <= 100 and len(wrapped) > len(rules)
    piped = CliRunner().invoke(cli, ["rules", "list"]).output.splitlines()
    assert len(piped) == len(rules) and piped[0].split()[0] == rules[0].id


def test_rules_show_prints_refs_as_text_not_a_python_tuple():
    from diagnoser.cli.rules import pack_of
    with_refs = [r for r in pack_of().ordered() if any(v.refs for v in r.variants)]
    assert with_refs
    out = CliRunner().invoke(cli, ["rules", "show", with_refs[0].id]).output
    assert "refs: http" in out and "('" not in out.split("refs:")[1].splitlines()[0]


def _synthetic_cpu_only_trace(tmp_path) -> Path:
    """The real host_sync trace with its GPU side removed, as torch.profiler writes it without
    ProfilerActivity.CUDA (synthetic: made from a real trace by dropping events)."""
    import gzip
    import json
    doc = json.load(gzip.open(HOST_SYNC))
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation", "ac2g"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu]
    doc.pop("deviceProperties", None)
    path = tmp_path / "cpu_only.synthetic.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


def test_trace_without_gpu_activity_is_an_error_that_says_how_to_record_it(tmp_path):
    empty = tmp_path / "empty.synthetic.pt.trace.json"
    empty.write_text('{"traceEvents": []}')
    for path in (_synthetic_cpu_only_trace(tmp_path), empty):
        for extra in ([], ["--fail-on", "warning"]):
            result = CliRunner().invoke(cli, [str(path), *extra])
            assert result.exit_code == 1, result.output
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and "no GPU activity" in lines[0] and "ProfilerActivity.CUDA" in lines[0], lines


def test_folder_with_a_report_beside_its_sqlite_export_reads_the_export(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-nsys"))  # as on a machine without Nsight Systems
    run = tmp_path / "run"
    run.mkdir()
    (run / "healthy.sqlite.gz").symlink_to(FIX / "nsys" / "x_infer_fp32.sqlite.gz")  # a real export, renamed
    (run / "healthy.nsys-rep").write_bytes(b"NVIDIA Nsight Systems report (synthetic stand-in)")
    result = CliRunner().invoke(cli, [str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    import json
    assert [i["path"] for i in json.loads(result.output)["inputs"]] == [str(run / "healthy.sqlite.gz")]
    named = CliRunner().invoke(cli, [str(run / "healthy.nsys-rep")])  # the report named: pointed at its export
    assert named.exit_code == 1 and f"pass {run / 'healthy.sqlite.gz'} instead" in named.output


def test_nsys_export_hint_pastes_as_given_with_its_folder_and_a_leading_dash(tmp_path, monkeypatch):
    import shlex
    monkeypatch.setenv("PATH", str(tmp_path / "no-nsys"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("runs/a.nsys-rep", "--x.nsys-rep"):
        (tmp_path / name).write_bytes(b"NVIDIA Nsight Systems report (synthetic stand-in)")
    out = CliRunner().invoke(cli, ["runs/a.nsys-rep"]).output
    hint = out.split("convert it with `")[1].split("`")[0]
    assert shlex.split(hint)[-3:] == ["-o", "runs/a.sqlite", "runs/a.nsys-rep"]
    out = CliRunner().invoke(cli, ["--", "--x.nsys-rep"]).output
    hint = out.split("convert it with `")[1].split("`")[0]
    assert shlex.split(hint)[-3:] == ["-o", "./--x.sqlite", "./--x.nsys-rep"]


def test_junit_lists_no_inference_rule_as_passing_on_a_training_step():
    """"INFER002 passes" next to a failing TRAIN002 read as if the inference tree had been checked and
    found fine: rules of the other workload's tree do not apply to the run and are no test cases."""
    for trace, own, other in ((HOST_SYNC, "TRAIN", "INFER"), (FIX / "torch" / "x_infer_host_sync.pt.trace.json.gz",
                                                               "INFER", "TRAIN")):
        root = ET.fromstring(diagnose(trace).to_junit())
        names = [c.get("name") for c in root.iter("testcase")]
        assert [n for n in names if n.startswith(own)], trace
        assert not [n for n in names if n.startswith(other)], (trace, [n for n in names if n.startswith(other)])


def test_exit_codes_are_what_the_readme_table_says():
    readme = (FIX.parent / "README.md").read_text()
    table = readme.split("<!-- exit-codes -->")[1].split("<!-- /exit-codes -->")[0]
    documented = {int(row.split("|")[1]) for row in table.splitlines() if re.match(r"\| \d+ \|", row)}
    assert documented == {0, 1, 2, 3, 130}
    runs = {0: [str(HOST_SYNC)], 1: ["no-such-trace.json"], 2: [str(HOST_SYNC), "--top", "0"],
            3: [str(HOST_SYNC), "--fail-on", "warning"]}
    for code, args in runs.items():
        assert CliRunner().invoke(cli, args).exit_code == code, (code, args)
    assert CliRunner().invoke(cli, ["--no-such-option", str(HOST_SYNC)]).exit_code == 2
    assert CliRunner().invoke(cli, ["compare", str(HOST_SYNC)]).exit_code == 2  # no --to
    assert CliRunner().invoke(cli, ["--set", "nope=1", str(HOST_SYNC)]).exit_code == 1


def test_unknown_setting_is_named_with_the_nearest_one():
    out = CliRunner().invoke(cli, ["--set", "warning_min_gain=2", str(HOST_SYNC)]).output
    assert "unknown setting warning_min_gain (did you mean findings.warning_min_gain_pct?)" in out
    out = CliRunner().invoke(cli, ["--set", "nope=1", str(HOST_SYNC)]).output
    assert "unknown setting nope" in out and "expected NAME=VALUE" not in out


CUSTOM_RULE = """\
tree: team
rules:
  - id: TEAM001
    name: gpu-not-busy
    title: The GPU is not busy enough
    category: team_busy
    severity: warning
    requires: [gpu_busy_pct]
    params: {max_busy: 90}
    when:
      all:
        - {fact: gpu_busy_pct, op: lt, param: max_busy}
    message: "GPU busy {gpu_busy_pct:.0f}%."
    estimated_gain: (100 - gpu_busy_pct) / 10
    gain_of: step time
    fix: "Keep the GPU busy."
    verify: "Re-profile: gpu_busy_pct above {max_busy}%."
"""


def test_custom_rule_gain_beyond_its_unit_is_not_counted_and_says_why(tmp_path):
    """(100 - busy) / 10 on a 17%-busy step is 8.3 times the step: never "100% of step time together"."""
    rule = tmp_path / "team.yaml"
    rule.write_text(CUSTOM_RULE)
    report = diagnose(HOST_SYNC, rules=rule)
    (team,) = [f for f in report.findings if f.rule == "TEAM001"]
    assert team.estimated_gain == 0
    md = report.to_markdown()
    assert "TEAM001: its estimated_gain `(100 - gpu_busy_pct) / 10` gave 8.28 here" in md
    part = md[md.index("The GPU is not busy enough"):]
    assert "100% of step time" not in part.split("## ")[0]


def test_playbook_of_a_custom_rule_says_to_pass_its_rule_file(tmp_path):
    rule = tmp_path / "team.yaml"
    rule.write_text(CUSTOM_RULE)
    out = CliRunner().invoke(cli, ["playbook", "TEAM001"]).output
    assert "diagnose playbook TEAM001 --rules PATH" in out
    ok = CliRunner().invoke(cli, ["playbook", "TEAM001", "--rules", str(rule)])
    assert ok.exit_code == 0 and "TEAM001" in ok.output


def test_counts_read_as_whole_numbers_and_a_finding_reads_in_one_line():
    from diagnoser.report.formatting import fmt_value
    assert fmt_value(64.0, "blocks") == "64 blocks" and fmt_value(18.0, "count") == "18"
    assert fmt_value(31.4, "count") == "31.4" and fmt_value(35.0, "ms") == "35.0 ms"
    report = diagnose(HOST_SYNC)
    assert "| syncs_per_step | 18 |" in report.to_markdown()
    assert repr(report.findings[0]) == ("<Finding TRAIN002 critical: The host blocks on the GPU inside the step, "
                                        "over and over, up to 73% of step time>")


def test_tables_say_an_absent_text_the_same_way_in_both_reports():
    from diagnoser.api import compare
    c = compare(FIX / "torch" / "m_train_convnet_fp32.pt.trace.json.gz", FIX / "torch" / "m_train_convnet_bf16.pt.trace.json.gz")
    fixed = c.findings_table.set_index("rule").loc["TRAIN008"]
    assert fixed["severity_after"] is None
    assert diagnose(HOST_SYNC).findings_table.loc[0, "subject_kind"] is None


def test_compare_headline_is_the_wall_time_of_the_same_work_when_steps_are_cut_differently():
    """MW_noasync -> MW_baseline (two NVTX-less exports of one weather code, ../shared/external): the
    run went from 747 to 246 ms for the same ~4,150 launches; that is the headline, before the caveats
    and the per-kernel totals (where semi_discrete_step reads +62% per launch)."""
    from diagnoser.comparison.core import span_headline
    basis = {"before": {"span_ms": 747.2, "kernels": 4162}, "after": {"span_ms": 246.2, "kernels": 4148}}
    row = span_headline(basis)
    assert row["before"] == 747.2 and row["after"] == 246.2 and row["moved"] == "right" and row["speedup"] > 3
    assert span_headline({"before": {"span_ms": 747.2, "kernels": 4162}, "after": {"span_ms": 246.2, "kernels": 2000}}) is None
    mw = FIX.parent.parent / "shared" / "external" / "ncar"
    if not (mw / "MW_noasync.sqlite.gz").exists():
        return  # the real pair is in ../shared; the rule above is what it shows
    from diagnoser.api import compare
    md = compare(mw / "MW_noasync.sqlite.gz", mw / "MW_baseline.sqlite.gz").to_markdown()
    head = md.split("## Headline numbers")[1]
    assert head.index("wall time of the same work") < head.index("Steps not compared") < head.index("all kernels")
    assert "| wall time of the same work (4,162 -> 4,148 kernel launches) | 747.2 ms | 246.2 ms | -67.0% (3.03x) | better |" in md


def _fix_of(md: str, rule: str) -> str:
    part = md[md.index(f"`{rule}` "):]
    return part[part.index("**Fix:**"):].split("\n")[0]


def test_fix_speaks_of_the_cause_that_was_measured_not_every_branch():
    """KERN019 on an unaligned GEMM and KERN020 on a strided op (roofline_pairs, recorded with shapes and
    strides), KERN001 on kernels whose busiest pipe is the ALU: each fix is for that cause only."""
    md = diagnose(FIX / "torch" / "roofline_pairs.pt.trace.json.gz").to_markdown()
    gemm, bandwidth = _fix_of(md, "KERN019"), _fix_of(md, "KERN020")
    assert "multiples of 8" in gemm and "fp32 -" not in gemm and "skinny -" not in gemm and "bf16" not in gemm
    assert "contiguous" in bandwidth and "tiny -" not in bandwidth and "unaligned" not in bandwidth
    kernel = _fix_of(diagnose(FIX / "ncu" / "c_train_mlp_top.raw.csv.gz").to_markdown(), "KERN001")
    assert "integer and index math" in kernel and "fma -" not in kernel and "fp64 -" not in kernel


def test_post_processing_advice_of_a_non_pytorch_program_speaks_of_its_own_host_code():
    """INFER018 on an OpenACC weather model or a CuPy solver: never "box decoding and NMS"."""
    from diagnoser.api import load_rules
    rule = load_rules().rules["INFER018"]
    for framework in ("openacc-openmp", "cuda"):
        texts, _ = rule.texts({"framework": framework, "workload_kind": "inference"})
        assert "NMS" not in texts["message"] and "NMS" not in texts["fix"] and "box" not in texts["fix"]
    texts, _ = rule.texts({"framework": "pytorch", "workload_kind": "inference"})
    assert "batched_nms" in texts["fix"]  # a detector in PyTorch keeps its own advice


def test_decode_without_kv_cache_rule_does_not_ask_for_shapes_the_trace_has():
    """INFER030 (a decoder re-running its prefix) on an inference trace recorded with shapes: evaluated on the
    forward passes its shapes show (3 here, from the warm-up step on: one steady step), whose GEMM rows do not
    grow, so silent; never "collect with record_shapes=True"."""
    report = diagnose(FIX / "torch" / "x_infer_host_sync.pt.trace.json.gz")
    assert "Per-op roofline" in report.to_markdown()
    assert "INFER030" not in [ne.rule for ne in report.not_evaluated]
    facts = {f.name: f.value for f in report.facts if f.subject is None}
    assert facts["decode_rows_steps_measured"] == 3 and facts["decode_gemm_rows_growth_per_step"] == 0
    assert "INFER030" not in [f.rule for f in report.findings]
