#!/usr/bin/env bash
# What made the files beside this one (2026-11-24, branch wt-serving2): the serving bench
# (benches/serving.rs, `cargo bench --bench serving --no-run`, release) built twice on the build
# host, from ab1ea6e (`serving-base`) and from wt-serving2's speed commit 5032599 plus its next
# commit's `Scheduler::batch` (`serving-new`: running sequences in a deque dropped from the front,
# a request's record touched at its first and last token only, TensorRT-LLM's scheduler keeping
# the batch shape as it goes; not yet the decoders' fast path of that next commit),
# carried to the device machine (`run`, kind nvidia-h200: its 16-core Intel Xeon host, idle; the
# GPU is not used) and run there in the repository root, one call:
set -o pipefail; D=.devbin/serving2
{ date -u; nproc; lscpu | grep -E "Model name|MHz"; uptime; git log --oneline -1; } 2>&1 | tee $OUT/machine.txt
for r in 1 2; do for b in base new; do echo "== $b run $r"; $D/serving-$b --bench "x30000 128/128\$" 2>&1 | grep -E "iterations|time:|^serving"; done; done 2>&1 | tee $OUT/bench-30k-base-vs-new.txt
$D/serving-new --bench 2>&1 | grep -v -E "^Benchmarking|^$|Warming|Collecting|Analyzing" | tee $OUT/bench-all-new.txt
$D/serving-base --bench 2>&1 | grep -v -E "^Benchmarking|^$|Warming|Collecting|Analyzing" | tee $OUT/bench-all-base.txt
