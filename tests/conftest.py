"""Shared test fixtures: where the repo, its real fixtures and the big corpus live."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
CORPUS = REPO_ROOT.parent / "shared" / "corpus"


def _absent_corpus_links() -> set[str]:
    """fixtures/ files kept as links into ../shared/corpus (byte-identical copies of corpus files are
    not stored twice) whose target is absent here: tests that read them are skipped, not failed."""
    return {p.name for p in FIXTURES.rglob("*") if p.is_symlink() and not p.exists()}


ABSENT_CORPUS_LINKS = _absent_corpus_links()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed because it read a fixture linked to the absent corpus is skipped with why."""
    outcome = yield
    report = outcome.get_result()
    if not ABSENT_CORPUS_LINKS or not report.failed or call.excinfo is None:
        return
    text = str(report.longrepr)
    needed = sorted(n for n in ABSENT_CORPUS_LINKS if n in text)
    if needed:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: needs ../shared/corpus (fixtures' {needed[0]} is a link to it)")


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def corpus_dir() -> Path:
    """The big real corpus beside the checkout; tests needing it skip cleanly when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not present")
    return CORPUS


@pytest.fixture
def user_cache(tmp_path, monkeypatch) -> Path:
    """An empty user cache folder (DIAGNOSER_CACHE_DIR), the cache on."""
    monkeypatch.setenv("DIAGNOSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DIAGNOSER_NO_CACHE", raising=False)
    return tmp_path
