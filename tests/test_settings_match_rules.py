"""Settings that restate a rule condition's thresholds for a measurement (a note the analysis writes
where the rule stays silent) are declared from the rule's params (settings.from_rule_param): one
source, so a change of the rule file moves the setting with it."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from diagnoser import resources, settings
from diagnoser.timeline.measure import SETUP_NOTE_MAX_STEPS, SETUP_NOTE_MIN_PCT

RULES = Path(__file__).resolve().parents[1] / "rules"


def test_the_start_up_note_uses_the_one_time_setup_thresholds():
    params = yaml.safe_load((RULES / "shared.yaml").read_text())["conditions"]["one-time-setup"]["params"]
    assert (SETUP_NOTE_MIN_PCT.default, SETUP_NOTE_MAX_STEPS.default) == (params["min_setup_pct"], params["max_steady_steps"])


def test_a_setting_declared_from_a_rule_param_follows_an_edit_of_the_rule_file(tmp_path, monkeypatch):
    data = yaml.safe_load((RULES / "shared.yaml").read_text())
    data["conditions"]["one-time-setup"]["params"]["min_setup_pct"] = 37
    shutil.copytree(RULES, tmp_path / "rules")
    (tmp_path / "rules" / "shared.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(resources, "rules_dir", lambda: tmp_path / "rules")
    settings._shared_conditions.cache_clear()
    try:
        assert settings.from_rule_param("one-time-setup", "min_setup_pct") == 37
    finally:
        settings._shared_conditions.cache_clear()


def test_a_warm_start_reads_the_shared_conditions_from_the_cache_without_parsing_yaml(tmp_path):
    """The analyses declare these settings as they are imported: with the file seen before, a start takes them
    from the user cache (no PyYAML import, no parse); a corrupt entry is parsed again, to the same values."""
    import json
    import os
    import subprocess
    import sys

    probe = ("import json, sys; from diagnoser.timeline.measure import SETUP_NOTE_MAX_STEPS, SETUP_NOTE_MIN_PCT; "
             "print(json.dumps([SETUP_NOTE_MIN_PCT.default, SETUP_NOTE_MAX_STEPS.default, 'yaml' in sys.modules]))")
    env = dict(os.environ, DIAGNOSER_CACHE_DIR=str(tmp_path), PYTHONPATH=str(RULES.parent))
    env.pop("DIAGNOSER_NO_CACHE", None)

    def start():
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    params = yaml.safe_load((RULES / "shared.yaml").read_text())["conditions"]["one-time-setup"]["params"]
    expected = [params["min_setup_pct"], params["max_steady_steps"]]
    assert start() == expected + [True], "the first start parses the file"
    entries = list(tmp_path.glob("settings-*.json"))
    assert len(entries) == 1
    assert start() == expected + [False], "a warm start imports no YAML parser"
    entries[0].write_text("{not json")
    assert start() == expected + [True], "a corrupt entry is parsed again"
