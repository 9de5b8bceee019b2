#!/bin/bash
# usage: bash tools/gen/run_reruns.sh [RERUNS [STEPS]]   (from the repo root, on the GPU machine)
# RERUNS processes of each rerun program (calibration_pairs.py rerun), alternating mlp / decode, with the
# GPU work per step and the spin-kernel rate measured by the first full run (run_calibration.sh: mlp 3.13 ms,
# decode 0.821 ms, 1.97e6 cycles/ms); packs $OUT/r_mlp.tar and $OUT/r_decode.tar (each under 16 MiB).
RR=${1:-10}; RS=${2:-5}
G=$(cd $(dirname $0) && pwd)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cout}; mkdir -p $OUT
W=/tmp/cw; mkdir -p $W/mlp $W/decode
declare -A GMS=([mlp]=3.13 [decode]=0.821)
for k in $(seq 1 $RR); do for p in mlp decode; do echo "== $(date +%T) rerun $p $k"
  timeout 30 python3 $G/calibration_pairs.py rerun --out $W/$p --program $p --run $k --steps $RS \
    --gpu-ms ${GMS[$p]} --cycles-per-ms 1.97e6 2>&1 | grep -iv warn | tail -1 | cut -c1-120
done; done
for p in mlp decode; do for f in $W/$p/*.pt.trace.json; do gzip -9f $f; python3 $G/shrink_torch_trace.py $f.gz $f.gz.t && mv $f.gz.t $f.gz; done
  (cd $W && tar cf $OUT/r_$p.tar $p); done
ls -la $OUT
