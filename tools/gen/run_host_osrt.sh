#!/bin/bash
# usage: tools/gen/run_host_osrt.sh [NSYS_STEPS]   (from the repo root; Nsight Systems needs libdw: .dl, README.md)
# The host-work workloads (host_work_mechanisms.py: detection NMS, NumPy metrics, segmentation upsample, each
# with its GPU twin) and timeline_mechanisms.py's CPU-AdamW pair and MoE under Nsight Systems WITH what the host
# does: OS runtime calls (-t osrt), CPU samples with call chains (--sample=process-tree) and thread scheduling
# (--cpuctxsw=process-tree); capture range cudaProfilerApi; `nsys export --type sqlite`; gzips and packs
# $OUT/o_nsys.tar after every workload (the torch traces of the same workloads come from run_host_work.sh /
# run_timeline_mech.sh).
NSTEPS=${1:-4}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/oout}; mkdir -p $OUT
W=/tmp/ow; mkdir -p $W/nsys
H=${H:-"h_infer_detect_numpy_nms h_infer_detect_gpu_nms h_train_numpy_metrics h_train_gpu_metrics h_infer_seg_cpu_upsample h_infer_seg_gpu_upsample"}
TM=${TM:-"t_train_cpu_adamw t_train_gpu_adamw t_train_moe_nonzero"}
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cf $OUT/o_nsys.tar nsys); }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; $T/nsys --version; nproc; } > $OUT/o_env.txt 2>&1
cat $OUT/o_env.txt
nsys_one() {  # name script
  log nsys $1
  (cd $W/nsys && timeout 100 $T/nsys profile -t cuda,nvtx,osrt --sample=process-tree --cpuctxsw=process-tree \
     --capture-range=cudaProfilerApi --capture-range-end=stop -o $W/nsys/$1 --force-overwrite true \
     python3 $G/$2 $1 --mode plain --steps $NSTEPS 2>&1 | grep -v "^\s*$" | tail -3)
  rm -f $W/nsys/*.qdstrm
  timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/nsys/$1.sqlite $W/nsys/$1.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$1.sqlite; rm -f $W/nsys/$1.nsys-rep; ls -la $W/nsys/$1*; pack; }
for s in $H; do nsys_one $s host_work_mechanisms.py; done
for s in $TM; do nsys_one $s timeline_mechanisms.py; done
log done; ls -la $OUT
