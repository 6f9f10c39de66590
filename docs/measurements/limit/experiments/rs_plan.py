"""Write a reduce_scatter 64 MiB plan listing RS(core) -> RS(node) sequential and pipelined, from the campaign's plan."""
import json, sys
d = json.load(open(sys.argv[1]))
two = [{"op": "reduce_scatter", "slice": [["data", "core"]]}, {"op": "reduce_scatter", "slice": [["data", "node"]]}]
d["placements"] = d["placements"][:1]
d["placements"][0]["programs"] = [{"steps": two, "pipeline": p} for p in (1, 4, 16)]
json.dump(d, open(sys.argv[2], "w"))
