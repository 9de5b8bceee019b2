#!/bin/bash
# usage: bash tools/gen/run_reruns.sh [RERUNS [STEPS [BUDGET_S]]]   (from the repo root, on the GPU machine)
# RERUNS processes of each rerun program (calibration_pairs.py rerun: base, kernel5/3, busy5/3, sleep5/3),
# alternating mlp / decode, with the GPU work per step and the spin-kernel rate measured by the first full run
# (run_calibration.sh: mlp 3.13 ms, decode 0.821 ms, 1.97e6 cycles/ms). No new process starts past BUDGET_S
# seconds (default 400). The traces, gzipped and shrunk, go to $OUT/r.tar.part* (split under 15 MiB each);
# the per-process json (sizes of the injections) with them; the log to $OUT/log.
RR=${1:-10}; RS=${2:-5}; BUDGET=${3:-400}
G=$(cd $(dirname $0) && pwd)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cout}; mkdir -p $OUT
W=/tmp/cw; rm -rf $W; mkdir -p $W/mlp $W/decode
declare -A GMS=([mlp]=3.13 [decode]=0.821)
T0=$(date +%s)
for k in $(seq 1 $RR); do for p in mlp decode; do
  if [ $(( $(date +%s) - T0 )) -gt $BUDGET ]; then echo "== budget: stop before $p $k"; break 2; fi
  echo "== $(date +%T) rerun $p $k"
  timeout 60 python3 $G/calibration_pairs.py rerun --out $W/$p --program $p --run $k --steps $RS \
    --gpu-ms ${GMS[$p]} --cycles-per-ms 1.97e6 > $W/log_${p}_$k 2>&1
  rc=$?; grep -iv warn $W/log_${p}_$k | tail -1 | cut -c1-400
  if [ $rc -ne 0 ]; then echo "== rc $rc"; tail -20 $W/log_${p}_$k; [ $k -eq 1 ] && break 2; fi
done; done
echo "== $(date +%T) packing"
ls $W/mlp/*.pt.trace.json $W/decode/*.pt.trace.json | xargs -P 14 -I{} sh -c \
  "gzip -9f {} && python3 $G/shrink_torch_trace.py {}.gz {}.gz.t && mv {}.gz.t {}.gz"
(cd $W && tar cf - mlp decode | split -b 15m - $OUT/r.tar.part)
ls -la $OUT; echo "== $(date +%T) done in $(( $(date +%s) - T0 )) s"
