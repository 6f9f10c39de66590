#!/usr/bin/env bash
# 3. reduce_scatter 64M: the hierarchical RS(core) -> RS(node), sequential (coll/tuned) and pipelined (libnbc),
#    with Open MPI's own choices and with coll/tuned's reduce_scatter_block forced to recursive halving.
set -uo pipefail
W=/tmp/p2synth-limit/exp
export P2S_TESTBED_INSTANCE=limx
tb() { python -m scripts.testbed "$@"; }
trap 'tb down >/dev/null 2>&1 || true' EXIT
tb down >/dev/null 2>&1 || true
tb up --nodes 4 --ranks-per-node 2 --inter-node 1gbit --hierarchy-out $W/h.json >/dev/null
python $W/rs_plan.py /tmp/p2synth-limit/plan-4x2-1gbit-reduce_scatter-64M.json $W/rs-plan.json
echo "== reduce_scatter 64M, Open MPI's choices"
tb run -- python -m runtime.tune $W/rs-plan.json --out $W/rs2-tuned-default.json --top 3 --placements 1 --no-refit \
   --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
echo "== reduce_scatter 64M, coll/tuned reduce_scatter_block recursive halving"
OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm=3 tb run -- python -m runtime.tune \
   $W/rs-plan.json --out $W/rs2-tuned-halving.json --top 3 --placements 1 --no-refit --warmup 1 --iters 1 --repeats 5 2>&1 | grep "^#"
