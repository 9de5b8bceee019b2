#!/bin/bash
# usage: bash tools/gen/run_issue21.sh   (GPU machine, from the repo root or a copy of tools/gen)
# Profiles kernel_conflicts_atomics.py (groups conflicts, atomics) under
# `ncu --set full --clock-control none --profile-from-start off`, exports NVIDIA's raw and details CSV,
# times every job once without the profiler, runs oom_limits.py's snapshots, and packs
# $OUT/i21.txz (CSVs, snapshots, logs) and $OUT/i21_rep.txz (the .ncu-rep files).
G=$(cd $(dirname $0) && pwd)
OUT=${OUT:-/tmp/i21out}; W=/tmp/i21; mkdir -p $OUT $W/ncu $W/mem $W/rep
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee $W/env.txt
ncu --version | tail -1 | tee -a $W/env.txt
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)" | tee -a $W/env.txt
for g in conflicts atomics; do
  log plain $g; timeout 60 python3 $G/kernel_conflicts_atomics.py --group $g 2>&1 | tee $W/ncu/k21_$g.times.txt | tail -12
  log ncu $g
  timeout 200 ncu --set full --clock-control none --profile-from-start off --import-source no -f -o $W/rep/k21_$g \
      python3 $G/kernel_conflicts_atomics.py --group $g 2>&1 | grep -v "^==PROF==" | tail -4
  ncu --import $W/rep/k21_$g.ncu-rep --csv --page raw > $W/ncu/k21_$g.raw.csv 2>&1
  ncu --import $W/rep/k21_$g.ncu-rep --csv --page details > $W/ncu/k21_$g.details.csv 2>&1
  ncu --import $W/rep/k21_$g.ncu-rep --csv --page raw --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed 2>&1 | cut -c1-300 | tail -40
  (cd $W && tar cJf $OUT/i21.txz ncu mem env.txt)
done
log oom
timeout 200 python3 $G/oom_limits.py all --out $W/mem --timeout 60
gzip -f $W/mem/*.snapshot.pickle
(cd $W && tar cJf $OUT/i21.txz ncu mem env.txt && tar cJf $OUT/i21_rep.txz rep)
log done; ls -la $OUT $W/ncu $W/mem $W/rep
