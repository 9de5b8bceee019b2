"""Input kinds are told from content (gzipped or not), never from the file name."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.ingest.sniff import sniff

FIX = Path(__file__).resolve().parents[1] / "fixtures"

REAL = [
    ("ncu/small_kernels.ncu-rep.gz", "ncu-rep"),
    ("ncu/small_kernels.raw.csv", "ncu-csv-raw"),
    ("ncu/small_kernels.details.csv", "ncu-csv-details"),
    ("nsys/healthy.sqlite.gz", "nsys-sqlite"),
    ("torch/sdpa_attention.pt.trace.json.gz", "torch-trace"),
    ("mem/small_leak.snapshot.pickle.gz", "mem-snapshot"),
    ("mem/leak.memory_stats.json", "mem-stats"),
    ("mem/leak.memory_summary.txt", "mem-summary"),
]


@pytest.mark.parametrize("rel, kind", REAL)
def test_real_fixture_kind_is_detected(rel, kind):
    assert sniff(FIX / rel) == kind


def test_kind_ignores_misleading_extension(tmp_path):
    fake = tmp_path / "report.ncu-rep"
    with gzip.open(FIX / "torch/sdpa_attention.pt.trace.json.gz") as src, open(fake, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert sniff(fake) == "torch-trace"


def test_nsys_rep_is_recognised(corpus_dir):
    assert sniff(corpus_dir / "nsys" / "healthy.nsys-rep") == "nsys-rep"


@pytest.mark.parametrize("content, words", [
    (b"", "file is empty"),
    (b"hello world, not a profile", "unrecognized content"),
    (b'{"a": 1}', "JSON without traceEvents"),
])
def test_unknown_content_says_what_was_expected(tmp_path, content, words):
    p = tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        sniff(p)
    assert words in str(e.value) and str(p) in str(e.value) and "Nsight Compute report" in str(e.value)


def test_truncated_gzip_is_reported(tmp_path):
    data = (FIX / "mem/small_leak.snapshot.pickle.gz").read_bytes()
    p = tmp_path / "cut.pickle.gz"
    p.write_bytes(data[:1000])
    with pytest.raises(InputError, match="truncated"):
        sniff(p)
