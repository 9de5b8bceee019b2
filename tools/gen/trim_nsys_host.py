"""Shrink an Nsight Systems SQLite export made with OS runtime and CPU sampling for a fixture: keep each CPU
sample's leaf frame only (SAMPLING_CALLCHAINS stackDepth 0, what diagnoser reads), drop the OS runtime calls'
call chains (OSRT_CALLCHAINS rows; the calls stay) and the samples and context switches of threads that made
no CUDA call (worker threads: diagnoser reads the launching thread's), VACUUM, gzip -9.
usage: python3 trim_nsys_host.py IN.sqlite[.gz] OUT.sqlite.gz [--keep-threads]
--keep-threads keeps the leaf samples of every thread (the thread that holds the GIL makes no CUDA call)."""
import gzip
import shutil
import sqlite3
import sys
import tempfile

src, dst = sys.argv[1], sys.argv[2]
keep_threads = "--keep-threads" in sys.argv[3:]
with tempfile.NamedTemporaryFile(suffix=".sqlite") as tmp:
    with (gzip.open(src) if src.endswith(".gz") else open(src, "rb")) as f:
        shutil.copyfileobj(f, tmp)
    tmp.flush()
    c = sqlite3.connect(tmp.name)
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "SAMPLING_CALLCHAINS" in tables:
        c.execute("DELETE FROM SAMPLING_CALLCHAINS WHERE stackDepth > 0")
    cuda = "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for t in ("SCHED_EVENTS",) if keep_threads else ("COMPOSITE_EVENTS", "SCHED_EVENTS"):
            if t in tables:
                c.execute(f"DELETE FROM {t} WHERE globalTid NOT IN ({cuda})")
        if "SAMPLING_CALLCHAINS" in tables:
            c.execute("DELETE FROM SAMPLING_CALLCHAINS WHERE id NOT IN (SELECT id FROM COMPOSITE_EVENTS)")
    if "OSRT_CALLCHAINS" in tables:
        c.execute("DELETE FROM OSRT_CALLCHAINS")
    c.commit()
    c.execute("VACUUM")
    c.close()
    with open(tmp.name, "rb") as f, gzip.open(dst, "wb", 9) as g:
        shutil.copyfileobj(f, g)
