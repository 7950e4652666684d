#!/usr/bin/env bash
# device2.sh: the second call of churn3 on the H100 machine. Random on the
# simulator (the pool over gpu/sim, no driver) against the same on the
# GPU, to tell whether the figure's two modes come from the device's
# memory or from the host: main, mainH and churn interleaved on the
# simulator (six rounds), then churn alone, five counts in each of three
# processes on the simulator and two on the GPU.
# Run there: OUT=... ./device2.sh; everything lands in $OUT/churn3b.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=${OUT:?}/churn3b
mkdir -p "$res"
for b in main mainH churn; do gzip -dc "$here/mr-$b.test.gz" >"$res/mr-$b.test"; chmod +x "$res/mr-$b.test"; done
unset STREAMALLOC_DEVICE
OUT=$res/ab-sim ROUNDS=6 BT=150ms PAT='Random/resource=pool$' \
	"$here/run.sh" "$res/mr-main.test" "$res/mr-mainH.test" "$res/mr-churn.test" >"$res/ab-sim.log" 2>&1
for i in 1 2 3; do
	echo "process $i" >>"$res/modes-sim.txt"
	"$res/mr-churn.test" -test.run='^$' -test.bench='Random/resource=pool$' -test.count=5 -test.benchtime=150ms >>"$res/modes-sim.txt" 2>&1
done
for i in 1 2; do
	echo "process $i" >>"$res/modes-cuda.txt"
	STREAMALLOC_DEVICE=cuda "$res/mr-churn.test" -test.run='^$' -test.bench='Random/resource=pool$' -test.count=5 -test.benchtime=150ms >>"$res/modes-cuda.txt" 2>&1
done
rm -f "$res"/mr-*.test
tar -C "$res/.." -czf "$res/../churn3b.tgz" churn3b && rm -rf "$res"
