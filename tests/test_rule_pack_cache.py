"""The shipped rule pack kept whole in the user cache: a pack read from it is the pack built from the rule files
(every rule, condition, variant and param equal), a second load builds nothing, anything the pack depends on
(a rule file's text, the facts it is checked against, a user pack, a --param) is a miss or bypasses it, and a
corrupt or foreign entry is a miss that is written over."""
from __future__ import annotations

import marshal
import shutil

import pytest

from diagnoser.catalogue import catalogue
from diagnoser.pipeline import load_pack
from diagnoser.resources import rules_dir
from diagnoser.rulespec import cache, loader


@pytest.fixture
def cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DIAGNOSER_NO_CACHE", raising=False)
    return tmp_path


def _entries(folder) -> list:
    return sorted(folder.glob("rule-pack-*.marshal"))


def _no_build(monkeypatch):
    """Any rule built from its file data from here on fails the test."""
    def built(*a, **k):
        raise AssertionError("the pack was built, not read from the cache")
    monkeypatch.setattr(loader, "build_rules", built)


def test_the_cached_pack_is_the_built_pack_and_a_second_load_builds_nothing(cached, monkeypatch):
    built = load_pack()
    assert len(_entries(cached)) == 1
    _no_build(monkeypatch)
    again = load_pack()
    assert again == built and again is not built
    assert list(again.rules) == list(built.rules) and again.ordered() == built.ordered()
    for rid, rule in built.rules.items():  # (types too: tuples stay tuples, ints stay ints)
        assert repr(again.rules[rid]) == repr(rule)
    assert sum(len(r.variants) for r in again.rules.values()) > 0 and any(r.not_applicable for r in again.rules.values())


def test_no_cache_builds_every_time_and_writes_nothing(cached, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_NO_CACHE", "1")
    assert load_pack() == load_pack()
    assert not _entries(cached)


def test_what_the_pack_depends_on_is_in_its_key(cached, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rules")
    for p in loader.rule_files(rules_dir()):
        shutil.copy(p, folder / p.name)
    facts = catalogue()
    first = loader.build_pack(folder, known_facts=facts)
    assert len(_entries(cached)) == 1
    text = (folder / "oom.yaml").read_text()
    (folder / "oom.yaml").write_text(text.replace("title:", "title:", 1) + "\n# edited\n")
    assert loader.build_pack(folder, known_facts=facts) == first  # (a comment: the same rules) ...
    assert len(_entries(cached)) == 2  # ... built again, under its own key
    more = dict(facts, zz_synthetic_fact=next(iter(facts.values())))  # (a catalogue with one more fact)
    loader.build_pack(folder, known_facts=more)
    assert len(_entries(cached)) == 3


def test_a_user_pack_or_a_param_bypasses_the_cache(cached, monkeypatch, tmp_path_factory):
    load_pack()
    rid = sorted(load_pack().rules)[0]
    name = sorted(load_pack().rules[rid].params)[0] if load_pack().rules[rid].params else None
    _no_build(monkeypatch)
    with pytest.raises(AssertionError, match="was built"):
        load_pack(params=[f"{rid}.{name}=1"] if name else ["nonexistent.x=1"])
    user = tmp_path_factory.mktemp("user") / "mine.yaml"
    shutil.copy(rules_dir() / "oom.yaml", user)  # (a user pack replacing the shipped OOM rules with the same ones)
    with pytest.raises(AssertionError, match="was built"):
        load_pack([str(user)])


@pytest.mark.parametrize("damage", ["truncated", "foreign", "wrong key", "unknown class", "short fields"])
def test_a_corrupt_or_foreign_entry_is_a_miss_and_is_written_over(cached, damage):
    built = load_pack()
    (entry,) = _entries(cached)
    data = entry.read_bytes()
    stored = marshal.loads(data)
    value, key = stored["value"], entry.stem[len("rule-pack-"):]
    fmt = cache.PACK_FORMAT

    def entry_of(fmt, key, value):
        return marshal.dumps({"format": f"{fmt} {key}", "value": value})

    if damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "foreign":
        entry.write_bytes(entry_of("other/1", key, value))
    elif damage == "wrong key":
        entry.write_bytes(entry_of(fmt, "0" * 40, value))
    elif damage == "unknown class":
        entry.write_bytes(entry_of(fmt, key, ("Popen", value[1])))
    else:
        entry.write_bytes(entry_of(fmt, key, (value[0], value[1][:-1])))
    assert cache.get_pack(key) is None
    assert load_pack() == built
    assert cache.get_pack(key) == built  # written over
