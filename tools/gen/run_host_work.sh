#!/bin/bash
# usage: tools/gen/run_host_work.sh [STEPS [NSYS_STEPS]]   (from the repo root; Nsight Systems needs libdw: .dl, README.md)
# Runs host_work_mechanisms.py's workloads under torch.profiler (one process, with_stack=True), then each
# under Nsight Systems (-t cuda,nvtx; capture range cudaProfilerApi), `nsys export --type sqlite`; gzips
# (torch traces also shrunk) and packs $OUT/h_torch.tar / $OUT/h_nsys.tar after every workload.
# Also under nsys: timeline_mechanisms.py's t_train_gpu_adamw (the CPU-optimizer twin without the torch
# profiler's per-op cost) and t_train_moe_nonzero with cuBLAS API tracing (-t cuda,nvtx,cublas: what the
# host does in the GEMM launch gaps of changing shapes).
STEPS=${1:-4}; NSTEPS=${2:-5}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hout}; mkdir -p $OUT
W=/tmp/hw; mkdir -p $W/nsys $W/torch
H="h_infer_detect_numpy_nms h_infer_detect_gpu_nms h_train_numpy_metrics h_train_gpu_metrics h_infer_seg_cpu_upsample h_infer_seg_gpu_upsample"
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cf $OUT/h_$1.tar $1); }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; $T/nsys --version; nproc; } > $OUT/h_env.txt 2>&1
cat $OUT/h_env.txt
log torch
timeout 240 python3 $G/host_work_mechanisms.py $H --mode torch --out $W/torch --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -v -i warn | tail -20
for f in $W/torch/*.pt.trace.json; do [[ -f $f ]] || continue
  gzip -9f $f && python3 $G/shrink_torch_trace.py $f.gz $f.gz.tmp && mv $f.gz.tmp $f.gz; ls -la $f.gz; done
pack torch
nsys_one() {  # name tag script trace
  log nsys $2
  (cd $W/nsys && timeout 100 $T/nsys profile -t $4 --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
     --capture-range-end=stop -o $W/nsys/$2 --force-overwrite true python3 $G/$3 $1 --mode plain --steps $NSTEPS 2>&1 | grep -v "^\s*$" | tail -3)
  rm -f $W/nsys/*.qdstrm
  timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/nsys/$2.sqlite $W/nsys/$2.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$2.sqlite; rm -f $W/nsys/$2.nsys-rep; ls -la $W/nsys/$2*; pack nsys; }
for s in $H; do nsys_one $s $s host_work_mechanisms.py cuda,nvtx; done
nsys_one t_train_gpu_adamw t_train_gpu_adamw timeline_mechanisms.py cuda,nvtx
nsys_one t_train_moe_nonzero t_train_moe_nonzero_cublas timeline_mechanisms.py cuda,nvtx,cublas
log done; ls -la $OUT
