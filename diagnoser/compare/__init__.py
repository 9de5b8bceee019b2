"""`diagnose compare BEFORE... --to AFTER...`: two runs side by side, each fix's Verify step checked,
and a CI gate on regressions (issue 12). core.py runs both diagnoses and assembles the comparison
from sides, matching, verdicts, tables and gate; render.py writes Markdown and JSON, html.py the
side-by-side HTML page (charts.py draws what the report's chart modules do not)."""
