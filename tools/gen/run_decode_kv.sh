#!/bin/bash
# usage: bash tools/gen/run_decode_kv.sh [STEPS]   (from the repo root, on the GPU machine)
# decode_kv_pairs.py's decoders without / with a KV cache; traces gzipped and packed into $OUT/kv.txz.
STEPS=${1:-3}
G=$(cd $(dirname $0) && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/tools/gen:$G
OUT=${OUT:-/tmp/kvout}; mkdir -p $OUT
W=/tmp/kvw; rm -rf $W; mkdir -p $W/kv
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"; nproc; } > $OUT/kv_env.txt 2>&1
cat $OUT/kv_env.txt
timeout 200 python3 $G/decode_kv_pairs.py --out $W/kv --steps $STEPS 2>&1 | grep -v "^\s*$" | grep -iv "USDT" | tail -40
for f in $W/kv/*.pt.trace.json; do gzip -6 $f; done; ls -la $W/kv | awk '{print $5, $9}'
(cd $W && tar cJf $OUT/kv.txz kv)
ls -la $OUT
