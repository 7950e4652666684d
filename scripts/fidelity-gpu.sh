#!/usr/bin/env bash
# Second fidelity run (issue 20): probes, the GPU fidelity test, card
# replays of the traces and the PyTorch snapshots, and tune's picks checked
# on the card.
set -u
cd "$(dirname "$0")"
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
./poolprobe -device cuda > $L/probe2-cuda.txt 2>&1; echo "probe rc=$?"
(cd replay && STREAMALLOC_DEVICE=cuda ../replay.test -test.run 'TestPoolFidelity' -test.v) > $L/gpu-fidelity-test.txt 2>&1; echo "fidelity test rc=$?"
grep -E "^(---|===|ok|FAIL|PASS)|fidelity_test" $L/gpu-fidelity-test.txt
./streamalloc replay --device cuda --resource async --json traces/*.csv.gz snaps/*.gz > $L/replay-async-cuda.json 2>$L/replay-async-cuda.err; echo "replay rc=$?"
grep -E '"trace"|"peak_reserved_bytes"|"peak_live_bytes"' $L/replay-async-cuda.json
./poolprobe -device cuda -trace snaps/cuda-graph-h100.pickle.gz snaps/gpt2-train-h100.pickle.gz snaps/oom-h100.pickle.gz snaps/resnet50-amp-h100.pickle.gz snaps/three-stream-h100.pickle.gz 2>&1 | gzip > $OUT/snap-trace-cuda.txt.gz; echo "snap trace rc=$?"
./streamalloc tune --check --device cuda traces/torch-train-gpt-b.csv.gz > $L/tune-train-cuda.txt 2>&1; echo "tune rc=$?"
./streamalloc tune --check --device cuda --resource async traces/torch-train-gpt-b.csv.gz traces/torch-serve-varlen-b.csv.gz > $L/tune-async-cuda.txt 2>&1; echo "tune async rc=$?"
./streamalloc tune --check --device cuda --resource pool --max-ns 3000 --json traces/torch-serve-varlen-b.csv.gz > $L/tune-pool-serve-cuda.json 2>&1; echo "tune pool rc=$?"
cat $L/tune-train-cuda.txt $L/tune-async-cuda.txt
grep -A12 '"checked"' $L/tune-pool-serve-cuda.json | head -5
diff <(./poolprobe -device sim) $L/probe2-cuda.txt > $L/probe2-diff.txt; echo "probe diff rc=$? (0: the simulator's probe output is the card's)"
cat $L/probe2-diff.txt | head -20
tar czf $OUT/logs.tgz -C $OUT logs
