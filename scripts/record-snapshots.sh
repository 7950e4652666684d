#!/usr/bin/env bash
# record-snapshots.sh records the PyTorch memory snapshots of
# testdata/traces/ on a machine with a GPU, PyTorch, torchvision and
# transformers (no network, no Go): each workload of
# scripts/record-snapshots.py in its own process, writing
# <workload>-h100.pickle.gz and <workload>-h100.json (PyTorch's own peaks)
# into outdir, and a log per workload.
#
# Usage: scripts/record-snapshots.sh [outdir]   (default snapshots-out)
# Environment: WORKLOADS (default: all seven), RUN_TIMEOUT (seconds per
#   workload, default 120).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-snapshots-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/machine.txt"
python3 -c 'import torch, torchvision, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__, "transformers", transformers.__version__)' 2>&1 | tee -a "$out/machine.txt"
status=0
for w in ${WORKLOADS:-gpt2-train resnet50-amp llama-generate three-stream compile oom cuda-graph}; do
	start=$(date +%s)
	if timeout "${RUN_TIMEOUT:-120}" python3 "$here/record-snapshots.py" "$w" --out "$out" >"$out/$w.log" 2>&1; then
		echo "$w: ok in $(($(date +%s) - start)) s: $(tail -1 "$out/$w.log" | cut -c1-400)"
	else
		echo "$w: FAILED in $(($(date +%s) - start)) s; last lines of $out/$w.log:"
		tail -20 "$out/$w.log"
		status=1
	fi
done
exit $status
