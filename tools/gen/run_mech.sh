#!/bin/bash
# usage: tools/gen/run_mech.sh PHASES [STEPS [NSYS_STEPS]]   (PHASES: any of torch,nsys; run from the repo root)
# STEPS (3) profiled iterations under torch.profiler; NSYS_STEPS (6) captured under nsys: without NVTX the
# steps must be found from a kernel that repeats, so nsys gets more of them.
# Runs the mech_scenarios.py workloads under torch.profiler and under Nsight Systems (no NVTX; CUDA API,
# OS runtime and GPU memory tracing; steady workloads captured between cudaProfilerStart/Stop), then
# `nsys export --type sqlite`. Writes gzipped traces under /tmp/mw/{torch,nsys} and packs them as
# $OUT/m_<phase>.tar after every workload (a timeout keeps what is done). Needs libdw (.dl, see README).
PH=${1:-torch,nsys}; STEPS=${2:-3}; NSTEPS=${3:-6}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/mout}; mkdir -p $OUT
W=/tmp/mw; mkdir -p $W/nsys $W/torch
# steady workloads that may share one process (torch mode); CUDA-graph capture last
GROUP=${GROUP:-"infer_einsum_attention infer_sdpa_attention train_vit_matmul_attention train_wide_mlp_metric_syncs
 train_wide_mlp_metrics_on_gpu train_convnet_slow_loader train_convnet_gpu_batches infer_bert_tokenize train_unet_cached
 infer_unet_empty_cache infer_tiny_mlp_eager power_iteration_readback power_iteration_check_every_50 train_convnet_fp32
 train_convnet_bf16 infer_kv_decode train_vit_sdpa_healthy train_mixer_bf16 infer_tiny_mlp_graph"}
ALONE=${ALONE:-"setup_convnet_from_start setup_convnet_scheduled train_unet_no_cache"}
NSYS=${NSYS:-"train_wide_mlp_metric_syncs train_convnet_slow_loader infer_bert_tokenize train_unet_no_cache
 power_iteration_readback setup_convnet_from_start train_wide_mlp_metrics_on_gpu train_unet_cached"}
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cf $OUT/m_$1.tar $1); }
envof() { [[ $1 == train_unet_no_cache ]] && echo PYTORCH_NO_CUDA_MEMORY_CACHING=1; }
shrink() {  # gzip + compact JSON (tools/gen/shrink_torch_trace.py: same events, no indentation)
  for f in $W/torch/*.pt.trace.json; do [[ -f $f ]] || continue
    gzip -9f $f && python3 $G/shrink_torch_trace.py $f.gz $f.gz.tmp && mv $f.gz.tmp $f.gz; ls -la $f.gz; done; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  $T/nsys --version; } > $OUT/m_env.txt 2>&1; cat $OUT/m_env.txt
if [[ $PH == *torch* ]]; then log torch group
  timeout 240 python3 $G/mech_scenarios.py $GROUP --mode torch --out $W/torch --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -v _warn_once | tail -25
  shrink; pack torch
  for s in $GROUP; do [[ -f $W/torch/$s.pt.trace.json.gz ]] && continue; log torch retry alone $s
    timeout 60 python3 $G/mech_scenarios.py $s --mode torch --out $W/torch --steps $STEPS 2>&1 | tail -3; shrink; pack torch; done
  for s in $ALONE; do log torch $s
    env $(envof $s) timeout 120 python3 $G/mech_scenarios.py $s --mode torch --out $W/torch --steps $STEPS 2>&1 | tail -3
    shrink; pack torch; done; fi
OSRT=""; $T/nsys profile --help 2>/dev/null | grep -q -- "--osrt-threshold" && OSRT="--osrt-threshold=10000"
if [[ $PH == *nsys* ]]; then for s in $NSYS; do log nsys $s
  CAP="--capture-range=cudaProfilerApi --capture-range-end=stop"; [[ $s == setup_* ]] && CAP=""
  for opts in "$OSRT" ""; do
    (cd $W/nsys && env $(envof $s) timeout 100 $T/nsys profile -t cuda,osrt --sample=none --cpuctxsw=none \
       --cuda-memory-usage=true $opts $CAP -o $W/nsys/$s --force-overwrite true \
       python3 $G/mech_scenarios.py $s --mode plain --steps $NSTEPS 2>&1 | grep -v "^\s*$" | tail -3)
    [[ -f $W/nsys/$s.nsys-rep || -z $opts ]] && break; log retry without $opts; done
  rm -f $W/nsys/*.qdstrm
  timeout 60 $T/nsys export --type sqlite --force-overwrite true -o $W/nsys/$s.sqlite $W/nsys/$s.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$s.sqlite; rm -f $W/nsys/$s.nsys-rep; ls -la $W/nsys/$s*; pack nsys; done; fi
log done; ls -la $OUT
