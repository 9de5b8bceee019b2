"""An Nsight Systems export holding the GPU work of several processes (`nsys profile torchrun ...` writes
all ranks into one file) is said to be one, with how to write one export per rank."""
from __future__ import annotations

import gzip
import shutil
import sqlite3

from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite

EAGER = "fixtures/nsys/g_tiny_mlp_eager.sqlite.gz"  # real, one process


def test_one_process_export_has_no_note():
    assert not [n for n in read_nsys_sqlite(EAGER).notes if "processes" in n]


def test_export_with_two_processes_says_so(tmp_path):
    """Synthetic: the real export with every other kernel moved to another pid."""
    db = tmp_path / "two.sqlite"
    with gzip.open(EAGER) as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = globalPid + (1 << 24) WHERE rowid % 2 = 0")
    [note] = [n for n in read_nsys_sqlite(db).notes if "processes" in n]
    assert "GPU work of 2 processes" in note and "%q{RANK}" in note
