"""`--set` reaches the per-rank workers: a process pool does not share the client's settings, so the
overrides travel with each task (real 2-rank DDP traces)."""
from __future__ import annotations

from diagnoser import settings
from diagnoser.distributed import measure_traces


def test_pool_workers_measure_under_the_clients_settings(fixtures_dir):
    paths = [str(fixtures_dir / "torch" / f"x_ddp_launch_bound.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    items = [(p, "torch-trace") for p in paths]

    def launch_pct(outcomes):
        return [o.measured.metrics.values["idle_launch_pct"] for o in outcomes]

    default = launch_pct(measure_traces(items, jobs=1))
    with settings.overridden({"timeline.launch_gap_max_ns": 1}):
        inline = launch_pct(measure_traces(items, jobs=1))
        pooled = launch_pct(measure_traces(items, jobs=2))
    assert inline == pooled
    assert inline != default  # the setting changed the measurement
