#!/bin/bash
# usage: tools/gen/run_kv_memory.sh [STEPS] [MAX_ENTRIES]   (from the repo root, on the lent H200)
# kv_memory_sources.py: one process per decode workload writes its torch trace (record_shapes, no
# profile_memory), memory snapshot and memory_stats JSON from the same steps; then, with NSYS=1 (the
# default; needs libdw in .dl, see README), s_decode_cache_full once more in plain mode under
# `nsys profile --cuda-memory-usage=true` (whole process: the cache's cudaMalloc is at start-up),
# exported to sqlite, with the tables that hold memory usage events listed. Packs $OUT/kvm.tar.
STEPS=${1:-3}; ME=${2:-5000}
G=$(cd $(dirname $0) && pwd)
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kmout}; W=$OUT/kvm; mkdir -p $W
log() { echo "== $(date +%T) $*"; }
pack() { tar cf $OUT/kvm.tar -C $W .; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  NC=$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1); echo "nsight-compute dir $NC"
  ${NC}host/target-linux-x64/nsys --version 2>&1 | tail -1; } > $W/env.txt 2>&1; cat $W/env.txt
for s in s_decode_cache_full s_decode_cache_fit s_decode_b1_roomy s_decode_b64_roomy; do log torch $s
  timeout 120 python3 $G/kv_memory_sources.py $s --out $W --steps $STEPS --max-entries $ME 2>&1 | grep -v -i warn | tail -4
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> $W/env.txt
  ls -la $W/$s.*; pack; done
if [[ ${NSYS:-1} == 1 ]]; then log nsys s_decode_cache_full
  NSYSB=$(ls -d /opt/nvidia/nsight-compute/*/ | tail -1)host/target-linux-x64/nsys
  (cd $W && timeout 150 $NSYSB profile -t cuda,nvtx --sample=none --cpuctxsw=none --cuda-memory-usage=true \
     -o $W/n_decode_cache_full --force-overwrite true \
     python3 $G/kv_memory_sources.py s_decode_cache_full --mode plain --steps 6 --out $W 2>&1 | grep -v -i warn | tail -4)
  rm -f $W/*.qdstrm
  timeout 90 $NSYSB export --type sqlite --force-overwrite true -o $W/n_decode_cache_full.sqlite $W/n_decode_cache_full.nsys-rep >/dev/null 2>&1
  python3 - $W/n_decode_cache_full.sqlite > $W/nsys_memory_tables.txt 2>&1 <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
names = [r[0] for r in db.execute("select name from sqlite_master where type='table' order by name")]
print("tables:", " ".join(names))
for t in names:
    if "MEM" in t.upper():
        cols = [r[1] + ":" + r[2] for r in db.execute(f"pragma table_info({t})")]
        n = db.execute(f"select count(*) from {t}").fetchone()[0]
        print(f"\n{t}: {n} rows\n  columns: {', '.join(cols)}")
        for row in db.execute(f"select * from {t} limit 4"):
            print("  ", row)
        if "bytes" in [c.split(":")[0] for c in cols]:
            for row in db.execute(f"select * from {t} order by bytes desc limit 4"):
                print("  biggest:", row)
for e in ("ENUM_CUDA_DEV_MEM_EVENT_OPER", "ENUM_CUDA_MEM_KIND"):
    if e in names:
        print(e, list(db.execute(f"select * from {e}")))
EOF
  cat $W/nsys_memory_tables.txt | cut -c1-400
  gzip -9f $W/n_decode_cache_full.sqlite; rm -f $W/n_decode_cache_full.nsys-rep; ls -la $W/n_decode_cache_full*; pack
fi
ls -la $W; log done
