#!/usr/bin/env bash
# Checks behind docs/measurements/limit.md's analysis, on a fresh 4x2 1gbit testbed (instance limx), from the repo root:
# 1. the duplex efficiency calibration measures under the namespaces' TCP congestion control (bbr here) and cubic;
# 2. the 64 MiB all_reduce: sequential against pipelined hierarchical programs, libnbc's iallreduce as it chooses
#    and forced to ring.
set -uo pipefail
W=/tmp/p2synth-limit/exp
export P2S_TESTBED_INSTANCE=limx
tb() { python -m scripts.testbed "$@"; }
trap 'tb down >/dev/null 2>&1 || true' EXIT
tb down >/dev/null 2>&1 || true
tb up --nodes 4 --ranks-per-node 2 --inter-node 1gbit --hierarchy-out $W/h.json
echo "default congestion control in the node namespaces: $(ip netns exec p2s-limx-n0 sysctl -n net.ipv4.tcp_congestion_control)"
for cc in cubic bbr; do
  for n in 0 1 2 3; do ip netns exec p2s-limx-n$n sysctl -qw net.ipv4.tcp_congestion_control=$cc; done
  echo "== calibrate with $cc"
  tb run -- python -m scripts.calibrate --hierarchy $W/h.json --out $W/fitted-$cc.json 2>&1 | grep -v "^plm"
done
python $W/make_plan.py /tmp/p2synth-limit/plan-4x2-1gbit-all_reduce-64M.json $W/ar-plan.json
echo "== all_reduce 64M, libnbc default"
tb run -- python -m runtime.tune $W/ar-plan.json --out $W/ar-tuned-default.json --top 5 --placements 1 --no-refit \
   --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
echo "== all_reduce 64M, libnbc iallreduce ring"
OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 tb run -- python -m runtime.tune $W/ar-plan.json --out $W/ar-tuned-ring.json \
   --top 5 --placements 1 --no-refit --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
for alg in 3 4; do
  echo "== reduce_scatter 64M, coll/tuned reduce_scatter_block algorithm $alg (3 recursive_halving, 4 butterfly)"
  OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm=$alg tb run -- python -m runtime.tune \
     /tmp/p2synth-limit/plan-4x2-1gbit-reduce_scatter-64M.json --out $W/rs-tuned-alg$alg.json --top 1 --placements 1 --no-refit \
     --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
done
