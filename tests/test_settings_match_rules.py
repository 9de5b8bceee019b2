"""Settings that restate a rule condition's thresholds for a measurement (a note the analysis writes
where the rule stays silent) keep the rule's numbers: a change of the rule's param without the
setting (or the other way round) fails here."""
from __future__ import annotations

from pathlib import Path

import yaml

from diagnoser.timeline.measure import SETUP_NOTE_MAX_STEPS, SETUP_NOTE_MIN_PCT

SHARED = Path(__file__).resolve().parents[1] / "rules" / "shared.yaml"


def test_the_start_up_note_uses_the_one_time_setup_thresholds():
    params = yaml.safe_load(SHARED.read_text())["conditions"]["one-time-setup"]["params"]
    assert SETUP_NOTE_MIN_PCT.default == params["min_setup_pct"]
    assert SETUP_NOTE_MAX_STEPS.default == params["max_steady_steps"]
