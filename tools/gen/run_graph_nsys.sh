#!/bin/bash
# usage: bash tools/gen/run_graph_nsys.sh   (from the repo root, on the lent H200; libdw in .dl; OUT set by the device tool)
# mech_scenarios.py infer_tiny_mlp_graph under Nsight Systems twice: traced whole (the default
# --cuda-graph-trace=graph: CUPTI_ACTIVITY_KIND_GRAPH_TRACE, no node kernels) and by node; and the eager
# twin infer_tiny_mlp_eager. 20 requests inside cudaProfilerStart/Stop. Writes $OUT/g_{graph,node,eager}.sqlite.gz
# and prints each export's graph tables. ~25 s.
set -u
export LD_LIBRARY_PATH=$PWD/.dl/root/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
T=$(ls -d /opt/nvidia/nsight-compute/*/ | tail -1)host/target-linux-x64
W=/tmp/gw; mkdir -p $W; G=$PWD/tools/gen
$T/nsys --version
for v in "graph:" "node:--cuda-graph-trace=node" "eager:"; do tag=${v%%:*}; opt=${v#*:}
  s=infer_tiny_mlp_graph; [[ $tag == eager ]] && s=infer_tiny_mlp_eager
  (cd $W && timeout 120 $T/nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none $opt --capture-range=cudaProfilerApi --capture-range-end=stop -o $W/g_$tag --force-overwrite true python3 $G/mech_scenarios.py $s --mode plain --steps 20 2>&1 | grep -v "^\s*$" | tail -2)
  rm -f $W/*.qdstrm
  timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/g_$tag.sqlite $W/g_$tag.nsys-rep >/dev/null 2>&1
  python3 -c "
import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); names=[r[0] for r in db.execute(\"select name from sqlite_master where type='table'\")]
print(sys.argv[1], [n for n in names if 'GRAPH' in n or 'KERNEL' in n])
for t in [n for n in names if 'GRAPH' in n]:
  print(t, [r[1] for r in db.execute(f'pragma table_info({t})')], db.execute(f'select count(*) from {t}').fetchone(), list(db.execute(f'select * from {t} limit 2')))
print('kernels', db.execute('select count(*) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone() if 'CUPTI_ACTIVITY_KIND_KERNEL' in names else None)
" $W/g_$tag.sqlite
  gzip -9f $W/g_$tag.sqlite; cp $W/g_$tag.sqlite.gz $OUT/; done
ls -la $OUT
