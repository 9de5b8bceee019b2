"""`diagnose compare BEFORE... --to AFTER...` and `diagnoser.compare(before, after)`: two runs side by
side, each fix's Verify step checked, and a CI gate on regressions (issue 12). core.py runs both
diagnoses and assembles the comparison from sides, matching, verdicts, tables and gate; render.py writes
Markdown and JSON, html.py the side-by-side HTML page (charts.py draws what the report's chart modules do
not). Its settings are diagnoser/comparison_settings.py (below the catalogue, which lists them). The
package is `comparison`, not `compare`: `diagnoser.compare` is the library call (diagnoser.api.compare)."""
