"""A Report as JUnit XML, the test report GitLab, Jenkins and GitHub (through an action) display.

One <testsuite> per run among the inputs; in it one <testcase> per rule evaluated on that run
(pipeline.Report.evaluated): a rule that fired is one test case per finding (the finding's subject
in its name where it has one), failed when the finding's severity is at or above `fail_on`, else
passed with the finding in <system-out>; every other evaluated rule passed, and so did a rule the
inputs show has nothing to act on (not applicable: no GEMMs, no OOM; the reason in <system-out>). A
rule of a tree that applies to the run but whose facts are absent is a skipped test case, with what
it needs and how to collect it; rules of trees that do not apply (the kernel tree on a PyTorch
trace) are no test cases. The failure's body is what the Markdown report says of the finding: its
message, evidence, gain, fix, verify and sources. Text from the inputs (file and kernel names) is
shown as in the other formats (text_safety.displayable), and the whole document passes through
visible_text: no control character, bidi override or U+FFFE/U+FFFF, so it is well-formed XML 1.0. No timestamps or host names: same inputs, same bytes.

The element and attribute names follow the JUnit schema of Jenkins' xunit plugin (junit-10.xsd),
which GitLab's test reports read too: testsuites > testsuite (name, tests, failures, errors,
skipped) > testcase (name, classname) > failure | skipped (message, type) | system-out.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from .._version import __version__
from ..rulespec.model import SEVERITY_RANK
from ..text_safety import displayable, visible_text
from .finding_parts import kernel_table, prediction_text, subject_label
from .formatting import fmt_value, share_pct

DEFAULT_FAIL_ON = "warning"  # without --fail-on, a JUnit report fails on warnings and criticals


def at_or_above(severity: str, fail_on: str) -> bool:
    return SEVERITY_RANK[severity] <= SEVERITY_RANK[fail_on]  # SEVERITY_RANK: critical 0, warning 1, info 2


def finding_text(f) -> str:
    """The finding as plain text: message, evidence (with the file each number came from), gain,
    the per-kernel rows of a grouped finding, fix, verify, sources."""
    lines = [f.message, "", "evidence:"]
    several = len({f.evidence_sources.get(n) for n in f.evidence} - {None}) > 1  # else `sources:` says it once
    for name, ev in f.evidence.items():
        source = f.evidence_sources.get(name) if several else None
        lines.append(f"  {name} = {fmt_value(ev.get('value'), ev.get('unit', ''))}" + (f"  ({source})" if source else ""))
    if f.estimated_gain > 0:
        lines += ["", f"estimated gain: up to {share_pct(f.estimated_gain)} of {f.gain_of}"]
    if prediction_text(f):
        lines += [f"predicted after the fix: {prediction_text(f)}"]
    table = kernel_table(f)
    if table:
        lines += ["", f"kernels ({'; '.join(['kernel', 'first launch', 'launches', 'gain'] + table['columns'])}):"]
        for row in table["rows"]:
            lines.append("  " + "; ".join([row["kernel"], str(row["first"]), str(row["launches"]), row["gain"], *row["cells"]]))
        if table["more"]:
            more = table["more"]
            lines.append(f"  {more['kernels']} more kernels; {more['launches']} launches; {more['gain']}")
    lines += ["", f"fix: {f.fix}", f"verify: {f.verify}"]
    if f.sources:
        lines.append("sources: " + ", ".join(f.sources))
    return "\n".join(lines) + "\n"


def _case_name(rule, f=None) -> str:
    label, name = subject_label(f) if f is not None else ("", "")
    subject = f" [{label}{': ' + name if name else ''}]" if label else ""
    return f"{rule.id} {rule.name}{subject}"


def _suite(name: str, inputs: list[str], rules, evaluated: set[str], findings, not_evaluated, not_applicable,
           fail_on: str, notes: list[str]) -> ET.Element:
    suite = ET.Element("testsuite", name=name)
    props = ET.SubElement(suite, "properties")
    for path in inputs:
        ET.SubElement(props, "property", name="input", value=path)
    ET.SubElement(props, "property", name="fail_on", value=fail_on)
    by_rule: dict[str, list] = {}
    for f in findings:
        by_rule.setdefault(f.rule, []).append(f)
    tests = failures = skipped = 0
    for rule in rules:
        classname = f"diagnoser.{rule.tree}"
        for f in by_rule.get(rule.id, []):
            case = ET.SubElement(suite, "testcase", name=_case_name(rule, f), classname=classname)
            tests += 1
            if at_or_above(f.severity, fail_on):
                failures += 1
                after = f" (after the fix: {prediction_text(f)})" if prediction_text(f) else ""
                failure = ET.SubElement(case, "failure", type=f.severity, message=f"[{f.severity}] {f.title}{after}")
                failure.text = finding_text(f)
            else:
                ET.SubElement(case, "system-out").text = f"[{f.severity}, below --fail-on {fail_on}] {f.title}\n\n{finding_text(f)}"
        if rule.id in by_rule:
            continue
        ne = not_evaluated.get(rule.id)
        if rule.id in evaluated:
            ET.SubElement(suite, "testcase", name=_case_name(rule), classname=classname)
            tests += 1
        elif rule.id in not_applicable:  # decided: what it is about is absent (no GEMMs, no OOM)
            case = ET.SubElement(suite, "testcase", name=_case_name(rule), classname=classname)
            tests += 1
            ET.SubElement(case, "system-out").text = f"not applicable: {not_applicable[rule.id].reason}\n"
        elif ne is not None and not ne.subjects:
            case = ET.SubElement(suite, "testcase", name=_case_name(rule), classname=classname)
            tests += 1
            skipped += 1
            ET.SubElement(case, "skipped", message=f"not evaluated: needs {', '.join(ne.missing)}").text = (
                f"collect it with: {ne.collect}" if ne.collect else None)
    if notes:
        ET.SubElement(suite, "system-out").text = "notes:\n" + "".join(f"- {n}\n" for n in notes)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    return suite


def render_junit(report, rules, fail_on: str | None = None) -> str:
    """`rules`: the rules in force (RulePack.ordered()); `fail_on`: warning | critical (None: warning)."""
    fail_on = fail_on or DEFAULT_FAIL_ON
    report = displayable(report)  # names from the inputs shown escaped, as in every other format
    not_evaluated = {ne.rule: ne for ne in report.not_evaluated}
    not_applicable = {na.rule: na for na in getattr(report, "not_applicable", [])}
    root = ET.Element("testsuites", name=f"diagnoser {__version__}")
    runs = report.separate_runs or [{"run": None, "inputs": [i["path"] for i in report.inputs]}]
    for i, r in enumerate(runs):
        inputs = list(r["inputs"])
        label = ", ".join(inputs)
        name = f"run {r['run']}: {label}" if r["run"] is not None else label
        findings = [f for f in report.findings if f.run == r["run"]]
        evaluated = set(report.evaluated[i]) if i < len(report.evaluated) else set()
        root.append(_suite(name, inputs, rules, evaluated, findings, not_evaluated, not_applicable, fail_on,
                           report.notes if i == 0 else []))
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    ET.indent(root)
    # visible_text over the whole: what is left outside XML 1.0's characters (rule texts) shown escaped
    return visible_text('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
