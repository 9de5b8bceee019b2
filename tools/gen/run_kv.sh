#!/bin/bash
# usage: tools/gen/run_kv.sh [STEPS]   (from the repo root, on the lent H200; needs libdw in .dl, see README)
# kv_scenarios.py decode workloads under torch.profiler (profile_memory=True), then train_mlp under
# Nsight Systems (6 captured steps, sqlite export) and under Nsight Compute (--set full, the first 60
# kernel launches after cudaProfilerStart, i.e. steady steps; raw CSV export). Writes gzipped / xz'd
# files to $OUT/kv/ as they are made.
STEPS=${1:-5}
G=$(cd $(dirname $0) && pwd)
NC=$(ls -d /opt/nvidia/nsight-compute/*/ | tail -1)
T=$NC/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kout}; W=$OUT/kv; mkdir -p $W
log() { echo "== $(date +%T) $*"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; $NC/ncu --version | tail -1; } > $W/env.txt 2>&1; cat $W/env.txt
for s in decode_b1_roomy decode_b64_roomy decode_cache_full decode_cache_fit; do log torch $s
  timeout 90 python3 $G/kv_scenarios.py $s --mode torch --out $W --steps $STEPS 2>&1 | grep -v Warn | tail -3
  f=$W/$s.pt.trace.json; [[ -f $f ]] && gzip -9f $f && python3 $G/shrink_torch_trace.py $f.gz $f.gz.tmp && mv $f.gz.tmp $f.gz; ls -la $W/$s*; done
log nsys train_mlp
(cd $W && timeout 120 $T/nsys profile -t cuda,osrt --sample=none --cpuctxsw=none --cuda-memory-usage=true \
   --capture-range=cudaProfilerApi --capture-range-end=stop -o $W/train_mlp --force-overwrite true \
   python3 $G/kv_scenarios.py train_mlp --mode plain --steps 6 2>&1 | tail -3)
rm -f $W/*.qdstrm
timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/train_mlp.sqlite $W/train_mlp.nsys-rep >/dev/null 2>&1
gzip -9f $W/train_mlp.sqlite; rm -f $W/train_mlp.nsys-rep; ls -la $W/train_mlp*
log ncu train_mlp
timeout 200 $NC/ncu --set full --profile-from-start off --launch-count 60 -o $W/train_mlp_top -f \
   python3 $G/kv_scenarios.py train_mlp --mode plain --steps 2 2>&1 | grep -v "^==PROF==" | tail -5
$NC/ncu --import $W/train_mlp_top.ncu-rep --csv --page raw > $W/train_mlp_top.raw.csv 2>/dev/null
gzip -9f $W/train_mlp_top.raw.csv; xz -9f $W/train_mlp_top.ncu-rep; ls -la $W
log done
