"""host_gaps' shortest gap per key, found in numpy (keys as name codes), equals the step-by-step loop over texts
it replaced (kept as `shortest_gaps_by_text`, the path for names that are not all str) on real traces."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.timeline import step_work
from diagnoser.timeline.measure import timeline_metrics

TRACES = ("host_sync.pt.trace.json.gz", "ddp_straggler.rank1.pt.trace.json.gz", "s_train_gil_thread.pt.trace.json.gz",
          "cal_compile_chain_before.pt.trace.json.gz")


@pytest.mark.parametrize("name", TRACES)
def test_shortest_host_gaps_match_the_loop_over_texts(name, monkeypatch):
    compared = []
    fast = step_work.shortest_gaps

    def both(steps, idx, start, end, thread, code, distinct):
        got = fast(steps, idx, start, end, thread, code, distinct)
        names = np.asarray(distinct, dtype=object)[code]
        assert got == step_work.shortest_gaps_by_text(steps, idx, start, end, thread, names)
        compared.append(len(got[1]))
        return got

    monkeypatch.setattr(step_work, "shortest_gaps", both)
    m = timeline_metrics(read_torch_trace(FIXTURES / "torch" / name))
    assert compared and compared[0] > 0 and m.host_gaps["gaps_us"]
