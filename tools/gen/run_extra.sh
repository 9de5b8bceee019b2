#!/bin/bash
# usage: tools/gen/run_extra.sh PHASES [STEPS]   (PHASES: any of torch,nsys,mem,ddp; run from the repo root)
# Adapted from ../shared/gen/run_all.sh. Writes gzipped traces under /tmp/xw/{torch,nsys,mem} and
# packs them as $OUT/x_<phase>.tar (files inside are already .gz).
PH=${1:-torch,nsys,mem}; STEPS=${2:-3}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (KINDS.md): a program that uses it can take the host's GPUs down
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/xout}; mkdir -p $OUT
W=/tmp/xw; mkdir -p $W/nsys $W/torch $W/mem $W/ddp
SC=${SC:-"train_naive_attention train_memory_bound infer_host_sync infer_input_pipeline infer_fp32"}
OOMS=${OOMS:-"oom_capacity"}
log() { echo "== $(date +%T) $*"; }
pack() { (cd $W && tar cf $OUT/x_$1.tar $1); }  # after every workload: a timeout keeps what is done
if [[ $PH == *torch* ]]; then for s in $SC; do log torch $s
  timeout 110 python3 $G/extra_scenarios.py $s --mode torch --out $W/torch --steps $STEPS 2>&1 | tail -3
  gzip -9f $W/torch/$s.pt.trace.json; ls -la $W/torch/$s*; pack torch; done; fi
if [[ $PH == *mem* ]]; then for s in $OOMS; do log mem $s
  timeout 90 python3 $G/extra_scenarios.py $s --mode snapshot --out $W/mem 2>&1 | tail -3
  gzip -9f $W/mem/$s.snapshot.pickle; ls -la $W/mem/$s*; pack mem; done; fi
if [[ $PH == *nsys* ]]; then for s in $SC; do log nsys $s
  (cd $W/nsys && timeout 130 $T/nsys profile -t cuda,nvtx,osrt,cublas,cudnn --sample=none --cpuctxsw=none \
     --cuda-memory-usage=true -o $W/nsys/$s --force-overwrite true \
     python3 $G/extra_scenarios.py $s --mode plain --steps $((STEPS+3)) 2>&1 | grep -v "^\s*$" | tail -3)
  rm -f $W/nsys/*.qdstrm
  timeout 90 $T/nsys export --type sqlite --force-overwrite true -o $W/nsys/$s.sqlite $W/nsys/$s.nsys-rep >/dev/null 2>&1
  gzip -9f $W/nsys/$s.sqlite; rm -f $W/nsys/$s.nsys-rep; ls -la $W/nsys/$s*; pack nsys; done; fi
if [[ $PH == *ddp* ]]; then log ddp
  nvidia-smi topo -m 2>&1 | head -8
  for spec in ${DDP:-x_ddp_comm_wait:4096 x_ddp_overlap_control:25}; do tag=${spec%%:*}; mb=${spec##*:}; log ddp $tag bucket $mb MB
    timeout 200 python3 -m torch.distributed.run --nproc_per_node 2 $G/extra_ddp.py --out $W/ddp --tag $tag --bucket-mb $mb --steps $STEPS 2>&1 | grep -v "^\s*$" | tail -4
    gzip -9f $W/ddp/$tag.rank*.pt.trace.json; ls -la $W/ddp/$tag*; pack ddp; done; fi
log done; ls -la $OUT
