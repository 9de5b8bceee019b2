#!/bin/bash
# usage: tools/gen/run_issue29_inference.sh [STEPS] [NSYS_STEPS]   (GPU machine, repo root; libdw in .dl, see README)
# issue29_inference.py: every timeline workload under torch.profiler (record_shapes), the d_* and a_* ones
# also under Nsight Systems (-t cuda,nvtx, capture range cudaProfilerApi, sqlite export), the k_* snapshots,
# and r_reduce under `ncu --set full --clock-control none` (raw + details CSV). One process per workload;
# packs $OUT/i29_{torch,nsys,mem,ncu}.txz after each phase. TL=, NSYS=, SNAP= pick workloads; NO_NCU=1 skips ncu.
STEPS=${1:-16}; NSTEPS=${2:-16}
G=$(cd $(dirname $0) && pwd)
NS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64 | tail -1)/nsys
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/i29out}; W=/tmp/i29w; mkdir -p $OUT $W/torch $W/nsys $W/mem $W/ncu
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cJf $OUT/i29_$1.txz $1); }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)"
  $NS --version; ncu --version | tail -1; } > $OUT/i29_env.txt 2>&1; cat $OUT/i29_env.txt
TL=${TL:-"d_decode_no_cache d_decode_cached a_lmhead_v50257 a_lmhead_v50304 c_tensors_from_cpu c_tensors_on_gpu c_anomaly_on c_anomaly_off"}
NSYS=${NSYS:-"d_decode_no_cache d_decode_cached a_lmhead_v50257 a_lmhead_v50304"}
for s in $TL; do log torch $s
  timeout 90 python3 $G/issue29_inference.py $s --mode torch --out $W/torch --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -v _warn_once | tail -4
  f=$W/torch/$s.pt.trace.json; [[ -f $f ]] && python3 -c "import json,sys; t=json.load(open(sys.argv[1])); json.dump(t, open(sys.argv[1],'w'), separators=(',',':'))" $f && gzip -9f $f
  ls -la $W/torch/$s*; done; pack torch
for s in $NSYS; do log nsys $s
  (cd $W/nsys && timeout 120 $NS profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
     --capture-range-end=stop -o $W/nsys/$s --force-overwrite true \
     python3 $G/issue29_inference.py $s --mode plain --steps $NSTEPS 2>&1 | grep -v "^\s*$" | tail -3)
  rm -f $W/nsys/*.qdstrm
  timeout 60 $NS export --type sqlite --force-overwrite true -o $W/nsys/$s.sqlite $W/nsys/$s.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$s.sqlite; rm -f $W/nsys/$s.nsys-rep; ls -la $W/nsys/$s*; done; pack nsys
for s in ${SNAP-k_kv_prealloc_oom k_kv_sized}; do log snapshot $s
  timeout 90 python3 $G/issue29_inference.py $s --out $W/mem 2>&1 | grep -v "^\s*$" | tail -4
  gzip -9f $W/mem/$s.snapshot.pickle; ls -la $W/mem/$s*; done; pack mem
if [[ -z $NO_NCU ]]; then log ncu r_reduce
timeout 150 ncu --set full --clock-control none --profile-from-start off --import-source no -f -o $W/ncu/r_reduce \
   python3 $G/issue29_inference.py r_reduce 2>&1 | grep -v "^==PROF==" | tail -6
ncu --import $W/ncu/r_reduce.ncu-rep --csv --page raw > $W/ncu/r_reduce.raw.csv 2>&1
ncu --import $W/ncu/r_reduce.ncu-rep --csv --page details > $W/ncu/r_reduce.details.csv 2>&1
gzip -9f $W/ncu/*.csv; xz -9f $W/ncu/r_reduce.ncu-rep; ls -la $W/ncu; pack ncu; fi
log done; ls -la $OUT
