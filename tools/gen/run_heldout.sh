#!/bin/bash
# usage: [HO_SET=2|3] bash tools/gen/run_heldout.sh [STEPS]   (from the repo root, on the GPU machine)
# HO_SET=2 or 3: the second or third held-out set (calibration_heldout.py --set 2|3)
# The held-out calibration pairs (calibration_heldout.py): the calibrated mechanisms at other sizes in one
# process, the torch.compile pair in its own (an empty Inductor/Triton cache: a cache hit would hide the
# recompiles), the other imported mechanisms in a third. Traces gzipped, packed into $OUT/ho_*.txz.
STEPS=${1:-4}
G=$(cd $(dirname $0) && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/tools/gen:$G
OUT=${OUT:-/tmp/hout}; mkdir -p $OUT
W=/tmp/hw; rm -rf $W; mkdir -p $W/ho
log() { echo "== $(date +%T) $*"; }
run() { python3 $G/calibration_heldout.py --out $W/ho --steps $STEPS --only $1 --set ${HO_SET:-1} 2>&1 | grep -v "^\s*$" | grep -iv "warn\|USDT" | tail -30; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; nproc; } > $OUT/ho_env.txt 2>&1
cat $OUT/ho_env.txt
OWN=sync_wide,sync_many_reads,pageable_small,loader_big_batch,tf32_train,attention_s1024,optimizer_wide,graph_decode_deep,compile_chain_small
log own; timeout 200 bash -c "$(declare -f run); G=$G W=$W STEPS=$STEPS HO_SET=${HO_SET:-1}; run $OWN"
log compile; export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d /tmp/ind.XXXXXX); export TRITON_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR/triton
timeout 120 bash -c "$(declare -f run); G=$G W=$W STEPS=3 HO_SET=${HO_SET:-1}; run compile_recompile"
log imported; timeout 160 bash -c "$(declare -f run); G=$G W=$W STEPS=3 HO_SET=${HO_SET:-1}; run gil_thread,anomaly,lmhead_unaligned,decode_no_cache,cudnn_multiscale"
log pack; for f in $W/ho/*.pt.trace.json; do gzip -6 $f; done; ls -la $W/ho | awk '{print $5, $9}'
(cd $W && tar cJf $OUT/ho_own.txz $(cd $W && ls ho/ho_{sync,pageable,loader,tf32,attention,optimizer,graph,compile_chain}*.gz 2>/dev/null))
(cd $W && tar cJf $OUT/ho_new.txz $(cd $W && ls ho/ho_{compile_recompile,cudnn,gil,anomaly,lmhead,decode}*.gz 2>/dev/null))
log done; ls -la $OUT
