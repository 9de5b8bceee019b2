#!/bin/bash
# usage: tools/gen/run_stack2026.sh [STEPS [NSYS_STEPS]]   (from the repo root; Nsight Systems needs libdw: .dl, README.md)
# stack2026_timeline.py's workloads (issue 29): every PyTorch one under torch.profiler (one process), then every
# one under Nsight Systems WITH what the host does (-t cuda,nvtx,osrt --sample=process-tree
# --cpuctxsw=process-tree; Python backtrace sampling too where this nsys has it), capture range cudaProfilerApi;
# the CuPy pageable upload once more WITHOUT samples or OS calls (-t cuda,nvtx: the export that cannot tell host
# work from waiting). Each process gets an empty Inductor/Triton cache (a cache hit would hide the recompiles).
# Exports run in the background while the next workload profiles; call chains deeper than 16 frames are
# dropped before gzip (diagnoser reads the leaf). Packs $OUT/s_torch.tar and $OUT/s_nsys_{a,b,c}.tar.
STEPS=${1:-3}; NSTEPS=${2:-3}
G=$(cd $(dirname $0) && pwd)
T=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64
export LD_LIBRARY_PATH=${LIBDW_DIR:-$PWD/.dl/root/usr/lib/x86_64-linux-gnu}:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/sout}; mkdir -p $OUT
W=/tmp/sw; mkdir -p $W/torch $W/nsys_a $W/nsys_b $W/nsys_c
TORCH="s_infer_compile_recompile s_infer_compile_dynamic s_train_cudnn_multiscale s_train_cudnn_fixed s_train_gil_thread s_train_gil_no_thread s_train_pageable_batches s_train_pinned_batches"
log() { echo "== $(date +%T) $*"; }
fresh() { export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d /tmp/ind.XXXXXX); export TRITON_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR/triton; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)"
  python3 --version; $T/nsys --version; nproc; } > $OUT/s_env.txt 2>&1
PYS=""; $T/nsys profile --help 2>&1 | grep -q -- "--python-sampling" && PYS="--python-sampling=true"
echo "python sampling: ${PYS:-no}" >> $OUT/s_env.txt
cat $OUT/s_env.txt
log torch; fresh
timeout 200 python3 $G/stack2026_timeline.py $TORCH --mode torch --out $W/torch --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -v -i "warn\|USDT" | tail -20
for f in $W/torch/*.pt.trace.json; do [[ -f $f ]] || continue; gzip -9f $f; ls -la $f.gz; done
(cd $W && tar cf $OUT/s_torch.tar torch)
export_one() {  # dir tag: sqlite export, chains cut to 16 frames, gzip, pack the dir
  timeout 120 $T/nsys export --type sqlite --force-overwrite true -o $W/$1/$2.sqlite $W/$1/$2.nsys-rep >/dev/null 2>&1
  python3 - $W/$1/$2.sqlite <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'SAMPLING_CALLCHAINS'").fetchone():
    c.execute("DELETE FROM SAMPLING_CALLCHAINS WHERE stackDepth > 16"); c.commit(); c.execute("VACUUM")
EOF
  gzip -9f $W/$1/$2.sqlite; rm -f $W/$1/$2.nsys-rep; ls -la $W/$1/$2*
  (cd $W && tar cf $OUT/s_$1.tar $1); }
nsys_one() {  # dir name tag trace extra...
  local d=$1 n=$2 tag=$3 tr=$4; shift 4
  log nsys $tag; fresh
  (cd $W/$d && timeout 150 $T/nsys profile -t $tr "$@" --capture-range=cudaProfilerApi --capture-range-end=stop \
     -o $W/$d/$tag --force-overwrite true python3 $G/stack2026_timeline.py $n --mode plain --steps $NSTEPS 2>&1 \
     | grep -v "^\s*$" | grep -v -i "warn" | tail -4)
  if [[ ! -f $W/$d/$tag.nsys-rep && -n "$PYS" && "$*" == *"$PYS"* ]]; then  # this nsys refused Python sampling
    log nsys $tag again without $PYS; fresh
    (cd $W/$d && timeout 150 $T/nsys profile -t $tr ${@/$PYS/} --capture-range=cudaProfilerApi --capture-range-end=stop \
       -o $W/$d/$tag --force-overwrite true python3 $G/stack2026_timeline.py $n --mode plain --steps $NSTEPS 2>&1 | tail -4)
  fi
  rm -f $W/$d/*.qdstrm
  export_one $d $tag & }
HOST="--sample=process-tree --cpuctxsw=process-tree"
# most telling first (a call that runs out of time keeps what is packed)
nsys_one nsys_a s_train_gil_thread s_train_gil_thread cuda,nvtx,osrt $HOST
nsys_one nsys_a s_train_gil_no_thread s_train_gil_no_thread cuda,nvtx,osrt $HOST
nsys_one nsys_c s_infer_compile_recompile s_infer_compile_recompile cuda,nvtx,osrt $HOST $PYS
nsys_one nsys_b s_cupy_pageable_upload s_cupy_pageable_upload cuda,nvtx,osrt $HOST
nsys_one nsys_b s_cupy_pageable_upload s_cupy_pageable_upload_nosamples cuda,nvtx --sample=none --cpuctxsw=none
nsys_one nsys_b s_cupy_pinned_upload s_cupy_pinned_upload cuda,nvtx,osrt $HOST
nsys_one nsys_b s_train_cudnn_multiscale s_train_cudnn_multiscale cuda,nvtx,osrt $HOST
nsys_one nsys_a s_train_pageable_batches s_train_pageable_batches cuda,nvtx,osrt $HOST
nsys_one nsys_c s_infer_compile_dynamic s_infer_compile_dynamic cuda,nvtx,osrt $HOST $PYS
nsys_one nsys_b s_train_cudnn_fixed s_train_cudnn_fixed cuda,nvtx,osrt $HOST
nsys_one nsys_a s_train_pinned_batches s_train_pinned_batches cuda,nvtx,osrt $HOST
wait
for d in nsys_a nsys_b nsys_c; do (cd $W && tar cf $OUT/s_$d.tar $d); done
log done; ls -la $OUT
