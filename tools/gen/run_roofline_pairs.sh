#!/bin/bash
# usage: tools/gen/run_roofline_pairs.sh   (GPU machine, repo root or any folder holding roofline_pairs.py)
# The roofline's Nsight Compute pairs: roofline_pairs.py under torch.profiler, then under
# `ncu --set full --clock-control none --profile-from-start off` (one call of each op), its raw CSV;
# packs everything as $OUT/roof.txz.
G=$(cd $(dirname $0) && pwd)
OUT=${OUT:-/tmp/rout}; W=/tmp/rw; mkdir -p $OUT $W/torch $W/ncu
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
ncu --version | tail -1
log torch; timeout 120 python3 $G/roofline_pairs.py --mode torch --out $W/torch 2>&1 | tail -5
log ncu
timeout 240 ncu --set full --metrics "regex:sm__ops_path_tensor_.*\.sum$" --clock-control none \
    --profile-from-start off --import-source no -f -o $W/ncu/roof \
    python3 $G/roofline_pairs.py --mode ncu --out $W/ncu 2>&1 | grep -v "^==PROF==" | tail -8
if [ ! -f $W/ncu/roof.ncu-rep ]; then log ncu again without the tensor regex
  timeout 200 ncu --set full --clock-control none --profile-from-start off --import-source no -f -o $W/ncu/roof \
      python3 $G/roofline_pairs.py --mode ncu --out $W/ncu 2>&1 | grep -v "^==PROF==" | tail -8
fi
ncu --import $W/ncu/roof.ncu-rep --csv --page raw > $W/ncu/roof.raw.csv 2>&1
ncu --import $W/ncu/roof.ncu-rep --csv --page raw --metrics Kernel\ Name,gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed 2>&1 | cut -c1-300
(cd $W && tar cJf $OUT/roof.txz torch ncu); ls -la $W/* $OUT
log done
