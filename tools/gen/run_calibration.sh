#!/bin/bash
# usage: bash tools/gen/run_calibration.sh [PAIR_STEPS [RERUNS [RERUN_STEPS]]]   (from the repo root, on the GPU machine)
# The calibration pairs (one process: calibration_pairs.py pairs), then RERUNS processes of each rerun
# program (calibration_pairs.py rerun), alternating mlp / decode. Gzips every trace compactly
# (shrink_torch_trace.py) and packs $OUT/c_pairs.tar and $OUT/r_reruns.tar after each phase.
PS=${1:-4}; RR=${2:-10}; RS=${3:-6}
G=$(cd $(dirname $0) && pwd)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cout}; mkdir -p $OUT
W=/tmp/cw; mkdir -p $W/pairs $W/reruns
log() { echo "== $(date +%T) $*"; }
shrink() { for f in $1/*.pt.trace.json; do [[ -f $f ]] || continue
  gzip -9f $f && python3 $G/shrink_torch_trace.py $f.gz $f.gz.tmp && mv $f.gz.tmp $f.gz; done; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; nproc; } > $OUT/c_env.txt 2>&1
cat $OUT/c_env.txt
log pairs
timeout ${PAIR_TIMEOUT:-240} python3 $G/calibration_pairs.py pairs --out $W/pairs --steps $PS 2>&1 | grep -v "^\s*$" | grep -iv warn | tail -40
shrink $W/pairs; (cd $W && tar cf $OUT/c_pairs.tar pairs); ls -la $W/pairs | awk '{print $5, $9}'
for k in $(seq 1 $RR); do for p in mlp decode; do log rerun $p $k
  timeout 40 python3 $G/calibration_pairs.py rerun --out $W/reruns --program $p --run $k --steps $RS 2>&1 | grep -iv warn | tail -2
done; done
shrink $W/reruns; (cd $W && tar cf $OUT/r_reruns.tar reruns); du -sh $W/reruns
log done; ls -la $OUT
