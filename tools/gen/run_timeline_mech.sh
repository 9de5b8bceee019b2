#!/bin/bash
# usage: tools/gen/run_timeline_mech.sh PHASES [STEPS [NSYS_STEPS]]   (PHASES: any of torch,nsys; from the repo root)
# Runs the timeline_mechanisms.py workloads under torch.profiler (one process for the steady ones, one for
# the from-start one), then each under Nsight Systems (-t cuda,nvtx; capture range cudaProfilerApi
# except t_setup_*, profiled whole with --cuda-memory-usage=true), `nsys export --type sqlite`; gzips (torch traces also shrunk) and packs
# $OUT/t_torch.tar / $OUT/t_nsys.tar after every workload. Needs libdw (.dl, see README.md).
# GROUP=, NSYS= pick workloads.
PH=${1:-torch,nsys}; STEPS=${2:-3}; NSTEPS=${3:-5}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tout}; mkdir -p $OUT
W=/tmp/tw; mkdir -p $W/nsys $W/torch
GROUP=${GROUP:-"t_train_long_attention t_train_long_sdpa t_infer_long_attention t_train_logits_readback
 t_train_logits_on_gpu t_train_cpu_adamw t_train_gpu_adamw t_train_moe_nonzero"}
NSYS=${NSYS:-"t_train_long_attention t_infer_long_attention t_train_logits_readback t_train_logits_on_gpu
 t_train_cpu_adamw t_train_moe_nonzero t_setup_short_infer"}
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cf $OUT/t_$1.tar $1); }
shrink() {
  for f in $W/torch/*.pt.trace.json; do [[ -f $f ]] || continue
    gzip -9f $f && python3 $G/shrink_torch_trace.py $f.gz $f.gz.tmp && mv $f.gz.tmp $f.gz; ls -la $f.gz; done; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  $T/nsys --version; nproc; } > $OUT/t_env.txt 2>&1; cat $OUT/t_env.txt
if [[ $PH == *torch* ]]; then log torch group
  timeout 200 python3 $G/timeline_mechanisms.py $GROUP --mode torch --out $W/torch --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -v _warn_once | tail -20
  shrink; pack torch
  log torch t_setup_short_infer
  timeout 60 python3 $G/timeline_mechanisms.py t_setup_short_infer --mode torch --out $W/torch 2>&1 | tail -3
  shrink; pack torch; fi
if [[ $PH == *nsys* ]]; then for s in $NSYS; do log nsys $s
  CAP="--capture-range=cudaProfilerApi --capture-range-end=stop"; [[ $s == t_setup_* ]] && CAP=""
  NV=""; [[ $s == t_infer_long_attention ]] && NV="TM_NVTX=1"
  MEM=""; [[ $s == t_setup_* ]] && MEM="--cuda-memory-usage=true"
  (cd $W/nsys && env $NV timeout 90 $T/nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none $MEM $CAP -o $W/nsys/$s --force-overwrite true \
     python3 $G/timeline_mechanisms.py $s --mode plain --steps $NSTEPS 2>&1 | grep -v "^\s*$" | tail -3)
  rm -f $W/nsys/*.qdstrm
  timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/nsys/$s.sqlite $W/nsys/$s.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$s.sqlite; rm -f $W/nsys/$s.nsys-rep; ls -la $W/nsys/$s*; pack nsys; done; fi
log done; ls -la $OUT
