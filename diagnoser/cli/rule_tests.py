"""Run the test cases beside rule files (`NAME.test.yaml`) and check every rule's coverage (`diagnose rules test`):
real inputs diagnosed through the pipeline, so this runner sits above it, not in the rule layer."""
from __future__ import annotations

from dataclasses import dataclass, field
import os
from pathlib import Path

from ..errors import RuleError
from ..facts import Fact, Subject
from ..rulespec.model import SCOPES, RulePack

NO_FINDING = "none"
TEST_SUFFIX = ".test.yaml"
# the keys of a case, in the order docs/rules.md lists them; any other key is an error (a misspelt
# `fire:` would check nothing)
CASE_KEYS = ("name", "input", "facts", "subjects", "fires", "silent", "first", "subject", "per_subject")
CHECK_KEYS = ("fires", "silent", "first", "subject", "per_subject")  # a case needs one: else it checks nothing
SUBJECT_KEYS = ("kind", "id", "name", "facts")


@dataclass
class CaseResult:
    file: str
    name: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    skipped: str = ""  # why the case could not run here (e.g. the big corpus is absent)


def case_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        return sorted(path.glob("*" + TEST_SUFFIX))
    if path.name.endswith(TEST_SUFFIX):
        return [path]
    sibling = test_file_of(path) if path.suffix == ".yaml" else None
    if sibling and sibling.exists():
        return [sibling]
    raise RuleError(path, None, "no test file: put cases in NAME.test.yaml beside NAME.yaml")


def test_file_of(rule_file: Path) -> Path:
    """NAME.test.yaml beside NAME.yaml."""
    return rule_file.with_name(rule_file.name[:-len(".yaml")] + TEST_SUFFIX)


def rule_files_under_test(paths) -> list[Path]:
    """The rule files `diagnose rules test PATH...` tests, each once: every rule file of a folder, a
    rule file itself, and for a test file NAME.test.yaml the rule file NAME.yaml beside it (the cases
    are about its rules, so it is loaded with the pack)."""
    from ..rulespec.loader import rule_files
    out: dict[Path, Path] = {}
    for path in map(Path, paths):
        if path.name.endswith(TEST_SUFFIX) and not path.is_dir():
            if not path.exists():
                raise RuleError(path, None, "no such test file")
            rule_file = path.with_name(path.name[:-len(TEST_SUFFIX)] + ".yaml")
            if not rule_file.exists():
                raise RuleError(path, None, f"no rule file {rule_file.name} beside it; a test file NAME.test.yaml "
                                            f"holds the cases of the rules in NAME.yaml")
            files = [rule_file]
        else:
            files = rule_files(path)
        for f in files:
            out.setdefault(f.resolve(), f)
    return list(out.values())


class CorpusAbsent(Exception):
    """A case reads the big corpus (../shared/corpus), which is not present here."""


def _resolve(test_file: Path, rel: str) -> str:
    """A case's input path, relative to the test file: its folder, or the nearest folder above it
    that holds the path (so `fixtures/x.gz` in `rules/NAME.test.yaml` is the repo's fixtures/x.gz),
    whatever the current directory is."""
    p = Path(rel)
    if p.is_absolute():
        if p.exists():
            return str(p)
    else:
        for base in (test_file.resolve().parent, *test_file.resolve().parent.parents):
            if (base / p).exists():
                return str(base / p)
            if (base / p).is_symlink() and "shared/corpus/" in os.readlink(base / p):
                raise CorpusAbsent(f"{rel} (a link to {os.readlink(base / p)})")  # a fixture kept once, in the corpus
    if "shared/corpus/" in rel or "shared/external/" in rel:  # the big real data beside the checkout
        raise CorpusAbsent(rel)
    raise RuleError(test_file, None, f"case input {rel} not found (paths are relative to the test file's "
                                     f"folder or a folder above it)")


def _first_by_subject(findings) -> dict[str, str]:
    """Subject id -> category of its first warning-or-critical finding (grouped kernels and launches
    included), by the rule's severity: a subject's diagnosis, whether or not its gain clears the
    floor that makes small findings info (findings.warning_min_gain_pct)."""
    from ..findings import leaves
    out: dict[str, str] = {}
    for f in findings:
        if (f.rule_severity or f.severity) not in ("critical", "warning") or f.subject is None:
            continue
        for part in (f.kernels or [f]):
            if (part.rule_severity or part.severity) not in ("critical", "warning"):
                continue
            for leaf in leaves(part):
                if leaf.subject is not None:
                    out.setdefault(leaf.subject.id, f.category)
    return out


def _synthetic_facts(case: dict, catalogue: dict) -> list[Fact]:
    def unit(n):
        return catalogue[n].unit if n in catalogue else ""
    facts = [Fact(n, v, unit(n), "synthetic test case") for n, v in (case.get("facts") or {}).items()]
    for s in case.get("subjects") or []:
        subj = Subject(s["kind"], str(s["id"]), s.get("name"))
        facts += [Fact(n, v, unit(n), "synthetic test case", subj) for n, v in (s.get("facts") or {}).items()]
    return facts


def run_case(case: dict, test_file: Path, pack: RulePack, catalogue: dict) -> CaseResult:
    from ..engine.evaluate import evaluate
    from ..engine.records import build_records
    from ..findings import arrange
    from ..pipeline import diagnose

    name = case.get("name", "?")
    result = CaseResult(str(test_file), name, True)
    try:
        if "input" in case:
            inputs = case["input"] if isinstance(case["input"], list) else [case["input"]]
            findings = diagnose([_resolve(test_file, p) for p in inputs], pack=pack).findings
        else:
            records, _ = build_records(_synthetic_facts(case, catalogue))
            findings = arrange(evaluate(pack.rules, records, catalogue)[0])
    except CorpusAbsent as e:
        result.skipped = f"needs {e}"
        return result
    except Exception as e:  # noqa: BLE001 - a broken case is a failed case, with its reason
        result.ok = False
        result.problems.append(f"error: {e}")
        return result
    fired = sorted({f.rule for f in findings})
    result.fired = fired
    for rid in case.get("fires") or []:
        if rid not in fired:
            result.problems.append(f"expected {rid} to fire; fired: {', '.join(fired) or 'nothing'}")
    for rid in case.get("silent") or []:
        if rid in fired:
            result.problems.append(f"expected {rid} to stay silent, but it fired")
    if "first" in case:
        serious = [f for f in findings if f.severity in ("critical", "warning")]
        got = serious[0].category if serious else NO_FINDING
        if got != case["first"]:
            result.problems.append(f"expected first warning-or-critical category {case['first']}, got {got}")
    if "subject" in case:
        serious = [f for f in findings if f.severity in ("critical", "warning")]
        want = {k: str(v) for k, v in case["subject"].items()}
        got_s = serious[0].subject.to_json() if serious and serious[0].subject else None
        if not got_s or any(str(got_s.get(k)) != v for k, v in want.items()):
            result.problems.append(f"expected first finding subject {want}, got {got_s}")
    if "per_subject" in case:
        got_map = _first_by_subject(findings)
        for sid, want in case["per_subject"].items():
            got = got_map.get(str(sid), NO_FINDING)
            if got != want:
                result.problems.append(f"subject {sid}: expected first category {want}, got {got}")
    result.ok = not result.problems
    return result


def _did_you_mean(word, choices) -> str:
    import difflib
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.8)
    return f" (did you mean `{close[0]}`?)" if close else ""


def read_cases(test_file: Path, rule_ids) -> list[dict]:
    """A test file's cases, checked: only known keys (with file:line, a did-you-mean and the known
    keys), real `input` or synthetic `facts`/`subjects` but not both, at least one check, rule ids
    in `fires`/`silent` that name rules in force, subjects of a kind a rule can be scoped to."""
    from ..rulespec.checks import line_for
    from ..rulespec.loader import read_yaml
    data, lines = read_yaml(test_file)
    data = {} if data is None else data

    def fail(where: tuple, problem: str):
        raise RuleError(test_file, line_for(lines, where) or 1, problem)

    if not isinstance(data, dict):
        fail((), "a test file is a mapping with `cases:` (a list of cases)")
    for key in data:
        if key != "cases":
            fail((key,), f"unknown key `{key}`{_did_you_mean(key, ['cases'])}; known keys: cases")
    cases = data.get("cases")
    if not isinstance(cases, list):
        fail(("cases",), "`cases` is a list of cases, each `- name: ...` with `input:` or `facts:` and what "
                         "it checks (see docs/rules.md, Test cases)")
    known_ids = set(rule_ids)
    subject_kinds = [k for k in SCOPES if k != "run"]
    for i, case in enumerate(cases):
        at = ("cases", i)
        if not isinstance(case, dict):
            fail(at, f"case {i + 1}: a case is a mapping (name, input or facts, fires, silent...)")
        label = f"case {i + 1}" + (f" ({case['name']})" if case.get("name") else "")
        for key in case:
            if key not in CASE_KEYS:
                fail(at + (key,), f"{label}: unknown key `{key}`{_did_you_mean(key, CASE_KEYS)}; "
                                  f"known keys: {', '.join(CASE_KEYS)}")
        if "input" in case and ("facts" in case or "subjects" in case):
            fail(at + ("input",), f"{label}: `input` (real files) and `facts`/`subjects` (synthetic) exclude each other; "
                                  f"make them two cases")
        if not any(k in case for k in CHECK_KEYS):
            fail(at, f"{label}: checks nothing; add fires, silent, first, subject or per_subject")
        inputs = case.get("input", [])
        if not all(isinstance(p, str) for p in (inputs if isinstance(inputs, list) else [inputs])):
            fail(at + ("input",), f"{label}: `input` is a path or a list of paths")
        for key in ("fires", "silent"):
            ids = case.get(key, [])
            if not isinstance(ids, list) or not all(isinstance(r, str) for r in ids):
                fail(at + (key,), f"{label}: `{key}` is a list of rule ids, e.g. [{next(iter(sorted(known_ids)), 'TEAM001')}]")
            for j, rid in enumerate(ids):
                if rid not in known_ids:
                    fail(at + (key, j), f"{label}: `{key}`: `{rid}` names no rule in force{_did_you_mean(rid, known_ids)}")
        for key in ("facts", "subject", "per_subject"):
            if key in case and not isinstance(case[key], dict):
                fail(at + (key,), f"{label}: `{key}` is a mapping")
        subjects = case.get("subjects", [])
        if not isinstance(subjects, list):
            fail(at + ("subjects",), f"{label}: `subjects` is a list of {{kind, id, name, facts}}")
        for j, subj in enumerate(subjects):
            where = at + ("subjects", j)
            if not isinstance(subj, dict) or "kind" not in subj or "id" not in subj:
                fail(where, f"{label}: a subject is a mapping with `kind` and `id` (and `name`, `facts`)")
            for key in subj:
                if key not in SUBJECT_KEYS:
                    fail(where + (key,), f"{label}: subject: unknown key `{key}`{_did_you_mean(key, SUBJECT_KEYS)}; "
                                         f"known keys: {', '.join(SUBJECT_KEYS)}")
            if subj["kind"] not in subject_kinds:
                fail(where + ("kind",), f"{label}: unknown subject kind `{subj['kind']}`"
                                        f"{_did_you_mean(subj['kind'], subject_kinds)}; use one of: {', '.join(subject_kinds)}")
            if not isinstance(subj.get("facts", {}), dict):
                fail(where + ("facts",), f"{label}: a subject's `facts` is a mapping")
    return cases


@dataclass
class RuleTestRun:
    """What `diagnose rules test` found."""

    results: list[CaseResult]
    coverage: list[str]  # failures: a rule file without its test file; a rule without a passing firing or silent case
    synthetic_only: list[str]  # rules whose passing firing cases are all synthetic (no real trace shows them yet)
    # a rule whose firing or silent cases are all skipped here (their files absent): neither passed nor
    # failed; checked where the files are (docs/rules.md: such cases are skipped, not failed)
    unchecked: list[str] = field(default_factory=list)


def run_tests(paths: list[Path], pack: RulePack, catalogue: dict) -> RuleTestRun:
    """Run every case; return the results, coverage problems, rules that fire only in synthetic
    cases and rules whose coverage rests on cases skipped here (RuleTestRun).

    The pack under test (`rule_files_under_test`) is every rule file of a folder given, a rule file
    given, or the one beside a test file given; every test file is checked before any case runs."""
    from ..rulespec.loader import file_data
    test_files: list[Path] = []
    for path in paths:
        files = case_files(Path(path))
        if not files:
            raise RuleError(path, None, "no test cases: put them in NAME.test.yaml beside each NAME.yaml "
                                        "(see docs/rules.md, Test cases)")
        test_files += files
    checked = [(tf, read_cases(tf, pack.rules)) for tf in test_files]
    results: list[CaseResult] = []
    fires_cov: set[str] = set()
    silent_cov: set[str] = set()
    real_fires: set[str] = set()
    skipped_fires: set[str] = set()
    skipped_silent: set[str] = set()
    for tf, cases in checked:
        for case in cases:
            r = run_case(case, tf, pack, catalogue)
            results.append(r)
            if r.skipped:
                skipped_fires.update(case.get("fires") or [])
                skipped_silent.update(case.get("silent") or [])
            elif r.ok:
                fires_cov.update(case.get("fires") or [])
                silent_cov.update(case.get("silent") or [])
                if "input" in case:
                    real_fires.update(case.get("fires") or [])
    coverage: list[str] = []
    unchecked: list[str] = []
    tested: list[str] = []
    for rule_file in rule_files_under_test(paths):
        ids = sorted(raw["id"] for raw, _, _ in file_data(rule_file)["rules"])
        if not ids:
            continue  # shared conditions only: tested through the rules that use them
        if not test_file_of(rule_file).exists():
            coverage.append(f"{rule_file}: no test file {test_file_of(rule_file).name} beside it for "
                            f"{', '.join(ids)}; give each rule a case where it fires and one where it stays silent")
            continue
        for rid in ids:
            for covered, skipped, what in ((fires_cov, skipped_fires, "fires"), (silent_cov, skipped_silent, "stays silent")):
                if rid in covered:
                    continue
                if rid in skipped:
                    unchecked.append(f"{rid} ({rule_file}): every case where it {what} was skipped here (its files are absent)")
                else:
                    coverage.append(f"{rid} ({rule_file}): no passing case where it {what}")
        tested += ids
    synthetic_only = sorted(rid for rid in set(tested) if rid in fires_cov and rid not in real_fires)
    return RuleTestRun(results, coverage, synthetic_only, unchecked)
