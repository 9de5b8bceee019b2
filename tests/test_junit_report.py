"""`--format junit` (`-o X.xml`): JUnit XML that GitLab, Jenkins and GitHub test-report actions read.

The document is checked against the structure of the JUnit schema those tools use (the junit-10.xsd
of Jenkins' xunit plugin, github.com/jenkinsci/xunit-plugin, which GitLab's parser follows): which
element may hold which, the required attributes, counts that are numbers. The check is written out
here (no XSD validator ships with the test extras), then the content is checked on real fixtures:
one test case per rule evaluated, a failure per finding at or above --fail-on with its message and
evidence in the body, skipped test cases for rules whose facts are absent."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST_SYNC_TRACE = FIX / "torch" / "host_sync.pt.trace.json.gz"
HEALTHY_TRACE = FIX / "torch" / "healthy.pt.trace.json.gz"
NCU_DETAILS = FIX / "ncu" / "k_cuda.details.csv.gz"  # a CSV export without --set full: rules skipped

# junit-10.xsd, element by element: the children each may hold, its required and its optional attributes
CHILDREN = {
    "testsuites": {"testsuite"},
    "testsuite": {"testsuite", "properties", "testcase", "system-out", "system-err"},
    "properties": {"property"},
    "property": set(),
    "testcase": {"skipped", "error", "failure", "system-out", "system-err", "rerunFailure", "rerunError",
                 "flakyFailure", "flakyError"},
    "failure": set(), "error": set(), "skipped": set(), "system-out": set(), "system-err": set(),
}
REQUIRED = {"testsuite": {"name", "tests", "failures", "errors"}, "property": {"name", "value"}, "testcase": {"name"}}
OPTIONAL = {
    "testsuites": {"name", "time", "tests", "failures", "errors"},
    "testsuite": {"group", "time", "skipped", "timestamp", "hostname", "id", "package", "file", "log", "url"},
    "testcase": {"time", "classname", "group"},
    "failure": {"type", "message"}, "error": {"type", "message"}, "skipped": {"type", "message"},
}
COUNTS = ("tests", "failures", "errors", "skipped")


def check_junit_schema(root: ET.Element) -> None:
    assert root.tag == "testsuites", root.tag
    for el in root.iter():
        assert el.tag in CHILDREN, f"element <{el.tag}> is not in the schema"
        for child in el:
            assert child.tag in CHILDREN[el.tag], f"<{child.tag}> may not be inside <{el.tag}>"
        attrs = set(el.attrib)
        missing = REQUIRED.get(el.tag, set()) - attrs
        assert not missing, f"<{el.tag}> lacks {missing}"
        extra = attrs - REQUIRED.get(el.tag, set()) - OPTIONAL.get(el.tag, set())
        assert not extra, f"<{el.tag}> has attributes the schema does not allow: {extra}"
        for key in COUNTS:
            if key in el.attrib and el.tag in ("testsuites", "testsuite"):
                assert el.attrib[key].isdigit(), f"<{el.tag} {key}={el.attrib[key]!r}>"
        if el.tag in ("failure", "skipped", "system-out", "property"):
            assert len(el) == 0, f"<{el.tag}> holds text only"


def _junit(*args: str) -> tuple[int, ET.Element, str]:
    result = CliRunner().invoke(cli, [*map(str, args), "--format", "junit"])
    root = ET.fromstring(result.output.encode())
    check_junit_schema(root)
    return result.exit_code, root, result.output


def test_host_sync_trace_fails_one_test_per_warning_or_critical_finding():
    code, root, text = _junit(HOST_SYNC_TRACE)
    assert code == 0  # without --fail-on the exit code is not gated; the report still shows the failures
    report = json.loads(CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), "--format", "json"]).output)
    serious = [f for f in report["findings"] if f["severity"] in ("warning", "critical")]
    (suite,) = root.findall("testsuite")
    failures = suite.findall("testcase/failure")
    assert len(failures) == len(serious) == int(suite.get("failures")) == int(root.get("failures")) >= 2
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) and len({c.get("name") for c in cases}) == len(cases)
    sync = next(c for c in cases if c.get("name").startswith("TRAIN002 "))
    failure = sync.find("failure")
    assert failure.get("type") == "critical" and "host blocks on the GPU" in failure.get("message")
    assert "syncs_per_step = 18" in failure.text and "fix: " in failure.text and "verify: " in failure.text
    assert all(c.get("classname", "").startswith("diagnoser.") for c in cases)
    # the kernel tree does not apply to a PyTorch trace: no test cases for it
    assert not [c for c in cases if c.get("name").startswith("KERN")]
    assert text == _junit(HOST_SYNC_TRACE)[2], "same inputs, same bytes"


def test_fail_on_critical_keeps_warnings_as_passed_cases_with_their_output():
    code, root, _ = _junit(HOST_SYNC_TRACE, "--fail-on", "critical")
    assert code == 3
    (suite,) = root.findall("testsuite")
    assert [f.get("type") for f in suite.iter("failure")] == ["critical"]
    warned = [c for c in suite.findall("testcase") if c.find("system-out") is not None]
    assert warned and "below --fail-on critical" in warned[0].find("system-out").text


def test_healthy_trace_passes_every_case():
    code, root, _ = _junit(HEALTHY_TRACE, "--fail-on", "warning")
    assert code == 0 and root.get("failures") == "0" and int(root.get("tests")) > 10


def test_rules_whose_facts_are_absent_are_skipped_with_how_to_collect_them():
    _, root, _ = _junit(NCU_DETAILS)
    (suite,) = root.findall("testsuite")
    skipped = suite.findall("testcase/skipped")
    assert skipped and int(suite.get("skipped")) == len(skipped)
    assert all(s.get("message").startswith("not evaluated: needs ") for s in skipped)
    assert any("ncu --set full" in (s.text or "") for s in skipped)


def test_several_runs_are_several_suites_and_xml_extension_picks_junit(tmp_path):
    out = tmp_path / "diagnosis.xml"
    result = CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), str(NCU_DETAILS), "-o", str(out)])
    assert result.exit_code == 0, result.output
    root = ET.fromstring(out.read_bytes())
    check_junit_schema(root)
    suites = root.findall("testsuite")
    assert [s.get("name").split(":")[0] for s in suites] == ["run 1", "run 2"]
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)


def test_the_schema_check_rejects_what_the_schema_rejects():
    bad = ET.fromstring('<testsuites><testsuite name="x" tests="1" failures="0"><testcase/></testsuite></testsuites>')
    try:
        check_junit_schema(bad)
    except AssertionError as e:
        assert "lacks" in str(e)
    else:
        raise AssertionError("a testsuite without errors= and a testcase without name= passed the check")
