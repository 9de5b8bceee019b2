#!/bin/bash
# usage: tools/gen/run_kv_memory_join.sh [STEPS]   (from the repo root, on the lent H200; libdw in .dl)
# kv_memory_join.py: (1) nsys_snap under `nsys profile` (whole process) -> j_b1_nsys.sqlite.gz + the same
# process's snapshot j_b1_nsys.snapshot.pickle.gz; (2) stack_trace -> j_b1_stack.pt.trace.json.gz
# (with_stack=True); (3) snap_only, another process of the same program -> j_b1_snap.snapshot.pickle.gz.
# Packs $OUT/join.tar.
STEPS=${1:-3}
G=$(cd $(dirname $0) && pwd)
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kjout}; W=$OUT/join; mkdir -p $W
log() { echo "== $(date +%T) $*"; }
pack() { tar cf $OUT/join.tar -C $W .; }
NSYSB=$(ls -d /opt/nvidia/nsight-compute/*/ | tail -1)host/target-linux-x64/nsys
log nsys_snap
(cd $W && timeout 200 $NSYSB profile -t cuda,nvtx --sample=none --cpuctxsw=none -o $W/j_b1_nsys --force-overwrite true \
   python3 $G/kv_memory_join.py nsys_snap --steps $((STEPS + 3)) --out $W 2>&1 | grep -v -i warn | tail -3)
rm -f $W/*.qdstrm
timeout 90 $NSYSB export --type sqlite --force-overwrite true -o $W/j_b1_nsys.sqlite $W/j_b1_nsys.nsys-rep >/dev/null 2>&1
python3 -c "import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); print('session start', list(db.execute('select * from TARGET_INFO_SESSION_START_TIME'))); print('kernel span', list(db.execute('select min(start), max(end), count(*) from CUPTI_ACTIVITY_KIND_KERNEL')))" $W/j_b1_nsys.sqlite
gzip -9f $W/j_b1_nsys.sqlite; rm -f $W/j_b1_nsys.nsys-rep; pack
log stack_trace
timeout 150 python3 $G/kv_memory_join.py stack_trace --steps $STEPS --out $W 2>&1 | grep -v -i warn | tail -3; pack
sleep 5
log snap_only
timeout 150 python3 $G/kv_memory_join.py snap_only --steps $STEPS --out $W 2>&1 | grep -v -i warn | tail -3; pack
ls -la $W; log done
