#!/bin/bash
# usage: [GROUPS_="cuda conv conv2"] [PACK=glob] tools/gen/run_kernel_mechanisms.sh   (GPU machine, repo root)
# Profiles tools/gen/kernel_mechanisms.py under `ncu --set full --clock-control none` (two reports:
# k_cuda = hand-written kernels, k_conv / k_conv2 = cuDNN convolutions), exports NVIDIA's raw and details
# CSV of each, and packs everything as $OUT/kmech.txz (xz shrinks .ncu-rep about 15x).
G=$(cd $(dirname $0) && pwd)
OUT=${OUT:-/tmp/kout}; W=/tmp/kw; mkdir -p $OUT $W
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
ncu --version | tail -1
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'cupy', cupy.__version__)"
for g in ${GROUPS_:-cuda conv conv2}; do log ncu $g
  timeout 220 ncu --set full --clock-control none --profile-from-start off --import-source no -f -o $W/k_$g \
      python3 $G/kernel_mechanisms.py --group $g 2>&1 | grep -v "^==PROF==" | tail -6
  ncu --import $W/k_$g.ncu-rep --csv --page raw > $W/k_$g.raw.csv 2>&1
  ncu --import $W/k_$g.ncu-rep --csv --page details > $W/k_$g.details.csv 2>&1
  ncu --import $W/k_$g.ncu-rep --csv --page raw --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed 2>&1 | cut -c1-400 | tail -20
  (cd $W && tar cJf $OUT/kmech.txz ${PACK:-k_*}); ls -la $W
done
log done; ls -la $OUT
