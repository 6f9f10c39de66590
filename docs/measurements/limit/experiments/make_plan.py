"""Write an all_reduce 64 MiB plan listing chosen programs (sequential and pipelined) from the campaign's plan."""
import json, sys
src, out = sys.argv[1], sys.argv[2]
d = json.load(open(src))
core, node = [["data", "core"]], [["data", "node"]]
three = [{"op": "reduce_scatter", "slice": core}, {"op": "all_reduce", "slice": node}, {"op": "all_gather", "slice": core}]
four = [{"op": "reduce_scatter", "slice": core}, {"op": "reduce_scatter", "slice": node},
        {"op": "all_gather", "slice": node}, {"op": "all_gather", "slice": core}]
d["placements"] = d["placements"][:1]
d["placements"][0]["programs"] = [{"steps": s, "pipeline": p} for s, p in
                                  ((three, 1), (three, 4), (three, 16), (four, 1), (four, 16))]
json.dump(d, open(out, "w"))
