#!/usr/bin/env bash
# 4. all_gather 64M: the best program of the campaign (AG(node) -> AG(core) x16, libnbc's iallgather across nodes)
#    with libnbc's iallgather forced to linear (1) and to recursive doubling (2).
set -uo pipefail
W=/tmp/p2synth-limit/exp
export P2S_TESTBED_INSTANCE=limx
tb() { python -m scripts.testbed "$@"; }
trap 'tb down >/dev/null 2>&1 || true' EXIT
tb down >/dev/null 2>&1 || true
tb up --nodes 4 --ranks-per-node 2 --inter-node 1gbit --hierarchy-out $W/h.json >/dev/null
for alg in 1 2; do
  echo "== all_gather 64M, libnbc iallgather algorithm $alg (1 linear, 2 recursive_doubling)"
  OMPI_MCA_coll_libnbc_iallgather_algorithm=$alg tb run -- python -m runtime.tune /tmp/p2synth-limit/plan-4x2-1gbit-all_gather-64M.json \
     --out $W/ag-tuned-alg$alg.json --top 1 --placements 1 --no-refit --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
done
