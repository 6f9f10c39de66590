"""The simulator on hand-computed cases, and Z3 minimising it exactly."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies import abstract
from p2synth.solver.costtogo import cost_to_go
from p2synth.solver.cost import step_seconds
from p2synth.solver.search import solve
from p2synth.solver.stepcosts import edge_costs
from p2synth.solver.topn import cheapest_programs
from p2synth.solver.algebra import PY
from p2synth.solver.open_mpi import binomial_rounds, libnbc_binomial_all_reduce, open_mpi_linear_reduce_scatter
from p2synth.solver.simulator import Simulator
from p2synth.hierarchies.model import CollectiveLibrary, HanAllGather, HanBroadcast, ReduceScatterRun, TunedAllReduce, TunedTrees
from tests import oracles

AR, RS, AG, R, B, A2A, SR = Collective
ALPHA, BW, GAMMA_GBPS, OVERHEAD = 10e-6, 1e9, 2.0, 5e-6


def _pair(uplink=None, duplex=None, library=None, reduce_scatter=None, tuned_trees=None):
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, latency_us=10.0, uplink_GBps=uplink, duplex_efficiency=duplex),
                          Level(name="core", count=1)), reduce_GBps=GAMMA_GBPS, step_overhead_us=5.0, library=library,
                  reduce_scatter=reduce_scatter, tuned_trees=tuned_trees)
    return Placement(h, (Axis(name="data", size=2),), ((2, 1),))


def _t(p, op, size, Y=0, Z=0, nonblocking=False):
    sim = Simulator(p, Request(frozenset({0})), size, nonblocking=nonblocking)
    return step_seconds(sim, abstract.AbstractState(0, Y, Z), op, 1, 1)


def test_two_device_all_reduce_small_takes_recursive_doubling():
    m = 1024.0
    # recursive doubling: 1 round of alpha + m/B, plus summing m; ring: 2 alpha + m/B + m/2 summed
    rd = ALPHA + m / BW + m / (GAMMA_GBPS * 1e9)
    ring = 2 * ALPHA + m / BW + (m / 2) / (GAMMA_GBPS * 1e9)
    assert rd < ring
    assert math.isclose(_t(_pair(), AR, m), rd + OVERHEAD, rel_tol=1e-12)


def test_two_device_all_reduce_large_takes_the_bandwidth_optimal_schedule():
    m = float(1 << 26)
    ring = 2 * ALPHA + m / BW + (m / 2) / (GAMMA_GBPS * 1e9)
    assert math.isclose(_t(_pair(), AR, m), ring + OVERHEAD, rel_tol=1e-12)


def test_reduce_scatter_and_all_gather_volumes():
    m = float(1 << 20)
    assert math.isclose(_t(_pair(), RS, m), ALPHA + (m / 2) / BW + (m / 2) / (GAMMA_GBPS * 1e9) + OVERHEAD, rel_tol=1e-12)
    # all_gather from a scattered state: each holds m/2 and receives the other half
    assert math.isclose(_t(_pair(), AG, m, Y=1), ALPHA + (m / 2) / BW + OVERHEAD, rel_tol=1e-12)


def test_two_way_traffic_slows_the_exchanging_schedules_by_the_duplex_efficiency():
    """duplex_efficiency 0.5 on the link: the exchanging schedules' transfer takes twice as long; the latency, the
    summing and the overhead do not change, nor the one-way binomial trees of reduce and broadcast."""
    m = float(1 << 20)
    assert math.isclose(_t(_pair(duplex=0.5), RS, m), ALPHA + 2 * (m / 2) / BW + (m / 2) / (GAMMA_GBPS * 1e9) + OVERHEAD, rel_tol=1e-12)
    assert math.isclose(_t(_pair(duplex=0.5), AG, m, Y=1), ALPHA + 2 * (m / 2) / BW + OVERHEAD, rel_tol=1e-12)
    # all_reduce: both schedules exchange; large: ring (2 alpha + 2 m/BW doubled), small: recursive doubling
    big = float(1 << 26)
    assert math.isclose(_t(_pair(duplex=0.5), AR, big), 2 * ALPHA + 2 * big / BW + (big / 2) / (GAMMA_GBPS * 1e9) + OVERHEAD, rel_tol=1e-12)
    small = 1024.0
    assert math.isclose(_t(_pair(duplex=0.5), AR, small), ALPHA + 2 * small / BW + small / (GAMMA_GBPS * 1e9) + OVERHEAD, rel_tol=1e-12)
    # a broadcast over two devices runs the binomial tree (one round, one way): the term leaves it alone
    tree = ALPHA + big / BW
    assert math.isclose(_t(_pair(duplex=0.5), B, big), tree + OVERHEAD, rel_tol=1e-12)
    assert _t(_pair(duplex=0.5), B, big) == _t(_pair(), B, big)


OPEN_MPI = CollectiveLibrary.OPEN_MPI


def test_open_mpi_reduce_scatter_is_the_runtimes_exchange_blocking_or_not():
    """Under Open MPI the numpy runtime runs a reduce_scatter step as a pairwise exchange of the blocks: two members,
    any size, pipelined or not: one alpha, m/2 out (both directions at once: with duplex 0.5 twice as long), m/2
    summed. Over two members the ideal schedule (no library) costs the same, duplex included."""
    G = GAMMA_GBPS * 1e9
    for m in (4096.0, float(128 << 10), float(1 << 20), float(1 << 26)):
        for duplex, slower in ((None, 1.0), (0.5, 2.0)):
            expected = ALPHA + slower * (m / 2) / BW + (m / 2) / G + OVERHEAD
            for nonblocking in (False, True):
                assert math.isclose(_t(_pair(duplex=duplex, library=OPEN_MPI), RS, m, nonblocking=nonblocking), expected, rel_tol=1e-12)
            assert math.isclose(_t(_pair(duplex=duplex), RS, m), expected, rel_tol=1e-12)


def test_open_mpi_reduce_scatter_over_four_members_pays_one_alpha_per_peer():
    """Four members: the exchange's latency is 3 alphas (one message per peer), where the ideal schedule's recursive
    halving pays log2 4 = 2; both move 3/4 of the data, and sum it."""
    m, G = float(1 << 20), GAMMA_GBPS * 1e9
    sim = Simulator(_four(), Request(frozenset({0})), m)
    exchanged = step_seconds(sim, abstract.AbstractState(0, 0, 0), RS, 1, 1)
    assert math.isclose(exchanged, 3 * ALPHA + 0.75 * m / BW + 0.75 * m / G + OVERHEAD, rel_tol=1e-12)
    ideal = step_seconds(Simulator(_four(library=None), Request(frozenset({0})), m), abstract.AbstractState(0, 0, 0), RS, 1, 1)
    assert math.isclose(exchanged - ideal, ALPHA, rel_tol=1e-9)


def test_other_libraries_keep_their_reduce_scatter():
    big = float(1 << 26)
    for library in (None,):  # NCCL prices every step by its own choice (tests/test_nccl_model.py)
        assert _t(_pair(library=library), RS, big) == _t(_pair(), RS, big) == _t(_pair(library=library), RS, big, nonblocking=True)
    # with one member per host coll/han passes every call to coll/tuned: its all_reduce and all_gather keep their
    # prices; its broadcast and reduce follow its fixed decision (over 2 members from 1 MiB: the whole buffer one way)
    for op, Y in ((AR, 0), (AG, 1)):
        assert _t(_pair(library=OPEN_MPI), op, big, Y=Y) == _t(_pair(), op, big, Y=Y)
    for op, Y in ((R, 0), (B, 0)):
        assert _t(_pair(library=OPEN_MPI, tuned_trees=TunedTrees.FASTEST), op, big, Y=Y) == _t(_pair(), op, big, Y=Y)
    G = GAMMA_GBPS * 1e9
    assert math.isclose(_t(_pair(library=OPEN_MPI), B, big), ALPHA + big / BW + OVERHEAD, rel_tol=1e-12)
    assert math.isclose(_t(_pair(library=OPEN_MPI), R, big), ALPHA + big / BW + big / G + OVERHEAD, rel_tol=1e-12)


LIBRARY = ReduceScatterRun.LIBRARY


def test_open_mpis_rules_for_a_linear_reduce_scatter_at_their_boundaries():
    """Open MPI 5's fixed rules (coll/tuned) for reduce_scatter_block: (group size, bytes per member) -> linear?"""
    KiB, MiB = 1024, 1 << 20
    cases = {(2, 128 * KiB - 1): False, (2, 128 * KiB): True, (3, 64 * MiB): True,
             (4, MiB - 1): False, (4, MiB): True, (7, 256 * MiB): True,
             (8, 512 * KiB - 1): False, (8, 512 * KiB): True, (8, 4 * MiB - 1): True, (8, 4 * MiB): False,
             (16, 512 * KiB): True, (16, 2 * MiB): False, (31, MiB): True,
             (32, 64 * KiB - 1): False, (32, 64 * KiB): True, (64, 256 * KiB - 1): True, (64, 256 * KiB): False}
    assert {key: open_mpi_linear_reduce_scatter(PY, float(key[0]), float(key[1])) for key in cases} == cases


def test_open_mpi_reduce_scatter_of_a_large_block_is_a_reduce_then_a_linear_scatter():
    """``reduce_scatter: library`` (MPI_Reduce_scatter_block, as the runtime ran it before the exchange): Two members, 512 KiB each (Open MPI runs basic_linear): the reduce to rank 0 (the cheaper of the binomial tree and
    the scatter-based reduce, here the latter: 2 alpha, m one way, m/2 summed), then rank 0 sends the other its
    half one way (alpha + m/2)."""
    m, G = float(1 << 20), GAMMA_GBPS * 1e9
    reduce = min(ALPHA + m / BW + m / G, 2 * ALPHA + m / BW + (m / 2) / G)
    old = _pair(library=OPEN_MPI, reduce_scatter=LIBRARY, tuned_trees=TunedTrees.FASTEST)  # as the campaigns then priced it
    assert math.isclose(_t(old, RS, m), reduce + ALPHA + (m / 2) / BW + OVERHEAD, rel_tol=1e-12)
    # the exchange it replaces would take alpha + m/2 + m/2 summed: the linear one is slower by m/2 one way
    assert _t(old, RS, m) > _t(_pair(), RS, m) + 0.9 * (m / 2) / BW
    # under coll/tuned's fixed decision the reduce over 2 members of 1 MiB is the whole buffer one way and summed
    assert math.isclose(_t(_pair(library=OPEN_MPI, reduce_scatter=LIBRARY), RS, m),
                        ALPHA + m / BW + m / G + ALPHA + (m / 2) / BW + OVERHEAD, rel_tol=1e-12)


def test_open_mpi_library_reduce_scatter_of_small_blocks_and_other_libraries_keep_the_bandwidth_optimal_schedule():
    small = float(128 << 10)  # 64 KiB per member: Open MPI runs butterfly, the bandwidth-optimal schedule
    assert _t(_pair(library=OPEN_MPI, reduce_scatter=LIBRARY), RS, small) == _t(_pair(), RS, small)
    big = float(1 << 26)
    for library in (None,):  # NCCL prices every step by its own choice (tests/test_nccl_model.py)
        assert _t(_pair(library=library), RS, big) == _t(_pair(), RS, big) == _t(_pair(library=library), RS, big, nonblocking=True)
    # the other collectives do not change but by coll/tuned's broadcast and reduce rules (tested above)
    for op, Y in ((AR, 0), (AG, 1), (R, 0), (B, 0)):
        assert _t(_pair(library=OPEN_MPI, reduce_scatter=LIBRARY, tuned_trees=TunedTrees.FASTEST), op, big, Y=Y) == _t(_pair(), op, big, Y=Y)


def test_open_mpi_nonblocking_reduce_scatter_is_always_a_binomial_reduce_then_a_linear_scatter():
    """``reduce_scatter: library``: libnbc's Ireduce_scatter_block, what a pipelined program's pieces run, at any size: the binomial reduce
    (alpha + m one way + m summed), then the linear scatter (alpha + m/2 one way)."""
    G = GAMMA_GBPS * 1e9
    for m in (4096.0, float(128 << 10), float(1 << 26)):
        expected = ALPHA + m / BW + m / G + ALPHA + (m / 2) / BW + OVERHEAD
        assert math.isclose(_t(_pair(library=OPEN_MPI, reduce_scatter=LIBRARY), RS, m, nonblocking=True), expected, rel_tol=1e-12)


def test_libnbcs_rule_for_a_binomial_all_reduce_at_its_boundaries():
    """libnbc's Iallreduce (Open MPI 5, default algorithm): binomial below 4 members or 64 KiB, Rabenseifner above."""
    cases = {(2, float(1 << 26)): True, (3, float(1 << 26)): True, (4, 65535.0): True, (4, 65536.0): False,
             (8, 65536.0): False, (8, 4096.0): True}
    assert {key: libnbc_binomial_all_reduce(PY, float(key[0]), key[1]) for key in cases} == cases


def _four(library=OPEN_MPI):
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=1)), reduce_GBps=GAMMA_GBPS, step_overhead_us=5.0, library=library)
    return Placement(h, (Axis(name="data", size=4),), ((4, 1),))


def test_open_mpi_nonblocking_all_reduce_of_two_members_is_a_binomial_reduce_then_a_binomial_broadcast():
    """libnbc's Iallreduce over two members, at any size: the reduce to the first member (alpha + m one way + m
    summed), then the broadcast back (alpha + m one way); the duplex efficiency does not apply (one way)."""
    G = GAMMA_GBPS * 1e9
    for m in (4096.0, float(1 << 26)):
        expected = 2 * ALPHA + 2 * m / BW + m / G + OVERHEAD
        for duplex in (None, 0.5):
            assert math.isclose(_t(_pair(duplex=duplex, library=OPEN_MPI), AR, m, nonblocking=True), expected, rel_tol=1e-12)
    # blocking (coll/tuned, one member per host): the ring, m one way each direction, half of it summed
    big = float(1 << 26)
    assert math.isclose(_t(_pair(library=OPEN_MPI), AR, big), 2 * ALPHA + big / BW + (big / 2) / G + OVERHEAD, rel_tol=1e-12)


def test_open_mpi_nonblocking_all_reduce_of_four_members_is_binomial_under_64_kib_and_rabenseifner_above():
    """Four members: under 64 KiB two binomial rounds up (alpha + m one way + m summed, each) and two down
    (alpha + m each); from 64 KiB on Rabenseifner: 2 log2 4 alpha, 2 (3/4) m exchanged, 3/4 m summed."""
    G = GAMMA_GBPS * 1e9
    small = 32768.0
    assert math.isclose(_t(_four(), AR, small, nonblocking=True), 4 * ALPHA + 4 * small / BW + 2 * small / G + OVERHEAD, rel_tol=1e-12)
    big = float(1 << 20)
    assert math.isclose(_t(_four(), AR, big, nonblocking=True), 4 * ALPHA + 1.5 * big / BW + 0.75 * big / G + OVERHEAD, rel_tol=1e-12)
    # other libraries, and blocking calls, keep the faster of recursive doubling and the ring
    for m in (small, big):
        assert _t(_four(library=None), AR, m, nonblocking=True) == _t(_four(library=None), AR, m)
    assert _t(_four(), AR, small) < _t(_four(), AR, small, nonblocking=True)


def test_z3_minimises_the_nonblocking_all_reduce_term_exactly():
    """Pipelined pieces under Open MPI (node 2 x core 2 and node 4 x core 2, below and above 64 KiB): Z3's top 3 cost
    what the explicit search's top 3 cost, and Z3's unsat proves that list."""
    from p2synth.encodings.programs import ProgramSketch
    from p2synth.hierarchies.statespace import state_space
    for p in (_han_flat(nodes=2), _han_flat(nodes=4)):
        for m in (16384.0, 65536.0, float(1 << 24)):
            n = len(Request(frozenset({0}), AR).reduced_cells(p))
            model = Simulator(p, Request(frozenset({0}), AR), m, nonblocking=True)
            costs = edge_costs(state_space(AR, n), model)
            found = cheapest_programs(costs, cost_to_go(costs, 3), 3)
            z3_top = ProgramSketch(AR, n, 3, model.step_time).top(3)
            assert [round(r.cost, 12) for r in z3_top] == [round(c, 12) for c, _ in found[:len(z3_top)]], (p, m)
            ranked, proved = ProgramSketch(AR, n, 3, model.step_time).prove_top([prog for _, prog in found])
            assert proved


def test_open_mpi_exchanged_reduce_scatter_shares_the_nodes_uplink():
    """node 2 x core 4, RS over data@node: four groups, one member of each on every node; each member sends the
    other its m/2 through the node's 1 GB/s NIC, shared by the four: alpha + 4 * (m/2) / 1 GB/s (no summing rate)."""
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=4, bandwidth_GBps=10.0, latency_us=1.0)), library=OPEN_MPI)
    p = Placement(h, (Axis(name="data", size=2), Axis(name="model", size=4)), ((2, 1), (1, 4)))
    m = float(1 << 26)
    exchanged = Simulator(p, Request(frozenset({0}), RS), m)
    assert math.isclose(step_seconds(exchanged, abstract.start_state(RS, 1), RS, 1, 1), ALPHA + 4 * (m / 2) / 1e9, rel_tol=1e-12)


def test_open_mpi_linear_scatter_shares_the_roots_uplink():
    """node 2 x core 4, RS over data@node: four groups, whose roots all sit on node 0, share its 1 GB/s NIC; each
    root sends its m/2 one way: 4 * (m/2) / 1 GB/s after the reduce."""
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=4, bandwidth_GBps=10.0, latency_us=1.0)), library=OPEN_MPI, reduce_scatter=LIBRARY)
    p = Placement(h, (Axis(name="data", size=2), Axis(name="model", size=4)), ((2, 1), (1, 4)))
    m = float(1 << 26)
    linear = Simulator(p, Request(frozenset({0}), RS), m)
    # the reduce: the model's own reduce step over the same group (tested by hand above)
    reduce = step_seconds(Simulator(p, Request(frozenset({0}), R), m), abstract.start_state(R, 1), R, 1, 1)
    assert math.isclose(step_seconds(linear, abstract.start_state(RS, 1), RS, 1, 1), reduce + ALPHA + 4 * (m / 2) / 1e9, rel_tol=1e-12)


def _han_flat(library=OPEN_MPI, nodes=2, cores=2, han_broadcast=None, tuned_all_reduce=None, han_all_gather=None):
    # node x core, one 1 GB/s NIC per node shared by its cores; shared memory 10 GB/s; no reduction compute
    h = Hierarchy(levels=(Level(name="node", count=nodes, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=cores, bandwidth_GBps=10.0, latency_us=1.0)), library=library,
                  han_broadcast=han_broadcast, tuned_all_reduce=tuned_all_reduce, han_all_gather=han_all_gather)
    return Placement(h, (Axis(name="data", size=nodes * cores),), ((nodes, cores),))


def _step(p, op, m, S, nonblocking=False):
    cells = len(Request(frozenset({0}), op).reduced_cells(p))
    sim = Simulator(p, Request(frozenset({0}), op), m, nonblocking=nonblocking)
    return step_seconds(sim, abstract.start_state(op, cells), op, S, cells)


def test_open_mpi_han_runs_a_group_over_two_hosts_as_two_pipelined_stages():
    """node 2 x core 2, one step over all four (the default program): coll/han, by hand. Inter-host stage between the
    two leaders: the ibcast sends one copy out of the root's node (linear, L - L_in = 2 - 1) and the ireduce brings
    2 (1 - 1/2) m = m in, both at 1 GB/s through the node's NIC (each node has one leader: no sharing); intra-host
    stage: a reduce and a broadcast over shared memory, m each at 10 GB/s. The slower stage over the whole buffer,
    the faster over one 64 KiB segment, alpha(node) per segment, and once more for the all_reduce's second tree."""
    p, m, seg = _han_flat(), float(1 << 26), 65536.0
    waits, alpha = 10e-6 * m / seg, 10e-6
    expected = {AR: m / 1e9 + 2 * seg / 10e9 + waits + alpha,
                R: m / 1e9 + seg / 10e9 + waits,
                B: m / 1e9 + seg / 10e9 + waits}
    for op, t in expected.items():
        assert math.isclose(_step(p, op, m, 0b11), t, rel_tol=1e-12), op
    # the flat Rabenseifner of coll/tuned pushes both members' halves through the NIC, twice: much longer
    assert _step(_han_flat(library=None), AR, m, 0b11) > 1.7 * _step(p, AR, m, 0b11)


def test_the_host_level_is_the_level_named_for_a_machine_else_the_innermost_levels_parent():
    levels = lambda *names: Hierarchy(levels=tuple(Level(name=n, count=2) for n in names))
    assert levels("pod", "rack", "node", "gpu").host_level == 2
    assert levels("rack", "host", "socket", "core").host_level == 1
    assert levels("rack", "server", "core").host_level == 1
    assert levels("a", "b", "c").host_level == 1
    assert levels("gpu").host_level == -1


def test_open_mpi_han_sums_its_stages_below_one_segment():
    """Under 64 KiB there is one segment: the stages run one after the other."""
    p, m = _han_flat(), 16384.0
    assert math.isclose(_step(p, B, m, 0b11), m / 1e9 + m / 10e9 + 10e-6, rel_tol=1e-12)


def test_open_mpi_han_broadcast_is_linear_up_to_four_leaders_then_a_binomial_tree():
    """Two members per host: four leaders get three copies out of the root's NIC (libnbc's linear ibcast); eight run
    its binomial tree, three rounds of one whole copy each, one after the other (HAN waits for each segment's
    inter-host stage); under ``han_broadcast: one-copy`` (the first frozen campaign's price) eight get one copy. The
    intra-host broadcast (m at 10 GB/s) is the faster stage."""
    m, seg = float(1 << 26), 65536.0
    for nodes, copies, price in ((4, 3, None), (8, 3, None), (8, 3, HanBroadcast.BINOMIAL), (8, 1, HanBroadcast.ONE_COPY)):
        p = _han_flat(nodes=nodes, han_broadcast=price)
        waits = 10e-6 * math.log2(nodes) * m / seg
        assert math.isclose(_step(p, B, m, 0b11), copies * m / 1e9 + seg / 10e9 + waits, rel_tol=1e-12), (nodes, price)


def _racks(racks, nodes, uplink, han_broadcast=None):
    # rack x node x core, no latency: node NICs 1 GB/s, a rack uplink `uplink` GB/s, shared memory 1000 GB/s
    return Hierarchy(levels=(Level(name="rack", count=racks, bandwidth_GBps=10.0, uplink_GBps=uplink, latency_us=0.0),
                             Level(name="node", count=nodes, bandwidth_GBps=1.0, latency_us=0.0),
                             Level(name="core", count=2, bandwidth_GBps=1000.0, latency_us=0.0)),
                     library=OPEN_MPI, han_broadcast=han_broadcast)


def test_binomial_rounds_count_the_transfers_that_leave_one_unit():
    """Six leaders, in the group's order (its slice's cells, the first most significant). Rack-major (2 racks x 3
    nodes): leader 0 sends to 1 inside the rack, then 0->2 inside and 1->3 across, then 0->4 and 1->5 both out of
    rack 0. Node-major (3 nodes x 2 racks, the order racks alternate in): only the first round crosses racks."""
    assert binomial_rounds(((0, 2), (1, 3))) == (((1, 1),), ((0, 1), (1, 1)), ((0, 2), (1, 1)))
    assert binomial_rounds(((1, 3), (0, 2))) == (((0, 1), (1, 1)), ((1, 1),), ((1, 1),))
    # 3 racks x 2 nodes: after the first round, both transfers of each round leave rack 0
    assert binomial_rounds(((0, 3), (1, 2))) == (((1, 1),), ((0, 2), (1, 1)), ((0, 2), (1, 1)))
    assert binomial_rounds(((1, 8),)) == (((1, 1),),) * 3


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(2, 4)), min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_binomial_rounds_are_ceil_log2_rounds_each_bounded_by_its_transfers(cells):
    """ceil(log2 L) rounds; in round r at most min(2^r, L - 2^r) transfers; each level's count is at least 1 where
    some transfer crosses it, and the innermost level of the leaders is crossed by every transfer."""
    leaders = math.prod(f for _, f in cells)
    rounds = binomial_rounds(tuple(cells))
    assert len(rounds) == math.ceil(math.log2(leaders))
    inner = max(l for l, _ in cells)
    for r, crossing in enumerate(rounds):
        counts = dict(crossing)
        assert counts.get(inner) == 1  # every leader sends and receives at most once a round
        assert all(1 <= c <= min(2 ** r, leaders - 2 ** r) for c in counts.values())


def test_open_mpi_han_broadcast_over_six_leaders_pays_each_rounds_busiest_uplink():
    """12 ranks, 2 racks x 3 nodes x 2 cores, the rack uplink 0.25 GB/s: one step over all of them. Rack-major the
    three rounds cost m/1e9 (inside a rack), m/0.25e9 (one transfer across) and 2m/0.25e9 (two out of rack 0, sharing
    its uplink); with the racks alternating (``data=[node 3, core 2] model=[rack 2]``, the step over both axes) only the
    first round crosses: m/0.25e9 + 2m/1e9. Plus the intra-host broadcast of one segment at 1000 GB/s. Under
    ``one-copy``: one copy, across the uplink, whatever the order."""
    m, seg = float(1 << 26), 65536.0
    intra = seg / 1000e9
    for price in (None, HanBroadcast.ONE_COPY):
        h = _racks(2, 3, 0.25, price)
        flat = Placement(h, (Axis(name="data", size=12),), ((2, 3, 2),))
        alternating = Placement(h, (Axis(name="data", size=6), Axis(name="model", size=2)), ((1, 3, 2), (2, 1, 1)))
        rack_major = _step(flat, B, m, 0b111)
        sim = Simulator(alternating, Request(frozenset({0, 1}), B), m)
        racks_alternate = step_seconds(sim, abstract.start_state(B, 3), B, 0b111, 3)
        if price is None:
            assert math.isclose(rack_major, m / 1e9 + m / 0.25e9 + 2 * m / 0.25e9 + intra, rel_tol=1e-12)
            assert math.isclose(racks_alternate, m / 0.25e9 + 2 * m / 1e9 + intra, rel_tol=1e-12)
        else:
            assert math.isclose(rack_major, m / 0.25e9 + intra, rel_tol=1e-12)
            assert math.isclose(racks_alternate, m / 0.25e9 + intra, rel_tol=1e-12)


def test_open_mpi_han_leaves_one_host_groups_one_member_per_host_nonblocking_steps_and_other_libraries_alone():
    m = float(1 << 26)
    for op in (AR, R, B):
        # a group inside one host, or one member per host: coll/tuned, as without a library (its all_reduce priced
        # as the faster schedule, as without a library; the fixed rules' price is tested below)
        for S in (0b10, 0b01):
            tuned = _han_flat(tuned_all_reduce=TunedAllReduce.FASTEST)
            assert _step(tuned, op, m, S) == _step(_han_flat(library=None), op, m, S)
        # a pipelined program's pieces run non-blocking (libnbc): no coll/han
        assert _step(_han_flat(), op, m, 0b11, nonblocking=True) == _step(_han_flat(library=None), op, m, 0b11, nonblocking=True)
        # under NCCL no coll/han either: NCCL's own choice (tests/test_nccl_model.py)
        assert _step(_han_flat(library=CollectiveLibrary.NCCL), op, m, 0b11) != _step(_han_flat(), op, m, 0b11)


def test_open_mpi_han_all_gather_is_a_gather_the_leaders_allgather_and_a_broadcast_one_after_the_other():
    """node 2 x core 2, one all_gather step over all four (each holds m = M/4): coll/han, by hand. A gather of the
    host's other block into its leader (m over shared memory, 10 GB/s), the two leaders' allgather of their 2m blocks
    (each leader receives the other's 2m through its node's NIC, 1 GB/s, alone on it), one alpha(node) round, and a
    broadcast of the whole 4m inside the host (10 GB/s). Under ``flat``, the flat group's price, as without a library.
    With 4 nodes the leaders' recursive doubling brings each leader the 3 other blocks, 6m."""
    M = float(1 << 24)
    m = M / 4
    assert math.isclose(_step(_han_flat(), AG, M, 0b11), m / 10e9 + 2 * m / 1e9 + 10e-6 + 4 * m / 10e9, rel_tol=1e-12)
    flat = _han_flat(han_all_gather=HanAllGather.FLAT)
    assert _step(flat, AG, M, 0b11) == _step(_han_flat(library=None), AG, M, 0b11) > 1.5 * _step(_han_flat(), AG, M, 0b11)
    m = M / 8
    four = m / 10e9 + 6 * m / 1e9 + 2 * 10e-6 + 8 * m / 10e9
    assert math.isclose(_step(_han_flat(nodes=4), AG, M, 0b11), four, rel_tol=1e-12)
    # one member per host, or inside one host: coll/tuned, as without a library
    for S in (0b10, 0b01):
        assert _step(_han_flat(), AG, M, S) == _step(_han_flat(library=None), AG, M, S)


def _tuned(nodes, rules=None, two_way=None):
    # node x core 2, no latency and no reduction compute: one 1 GB/s NIC per node shared by its two cores
    h = Hierarchy(levels=(Level(name="node", count=nodes, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=0.0,
                                duplex_efficiency=two_way),
                          Level(name="core", count=2, bandwidth_GBps=1000.0, latency_us=0.0)),
                  library=OPEN_MPI, tuned_all_reduce=rules)
    return Placement(h, (Axis(name="data", size=2 * nodes),), ((nodes, 2),))


def test_open_mpi_all_reduce_one_member_per_host_is_rabenseifner_folding_a_non_power_of_two():
    """An all_reduce step over the node cell only (one member per host, two such groups sharing each NIC): coll/tuned,
    whose fixed rules run Rabenseifner from 256 KiB for fewer than 4 members. By hand, for 3 nodes at 1 MiB: the
    ring's price over 3 members is 2 groups x (4/3) m / 1 GB/s; Rabenseifner runs over p' = 2 members, 2 x (1/2) m per
    member (3/4 of the ring's), and folds the third member in and out across the node level: m/2 each way, then
    m/2 and m one way, every transfer sharing the NIC with the other group (x 2). 6m/1e9 against the ring's
    8m/3e9. With a power of two (4 nodes) it is the ring's price; below 256 KiB, or priced ``fastest``, the faster
    of recursive doubling and the ring, as before; the duplex factor slows only the exchanging rounds."""
    m, node = float(1 << 20), 0b01
    assert math.isclose(_step(_tuned(3), AR, m, node), 6 * m / 1e9, rel_tol=1e-12)
    assert math.isclose(_step(_tuned(3, TunedAllReduce.FASTEST), AR, m, node), 8 * m / 3e9, rel_tol=1e-12)
    assert math.isclose(_step(_tuned(3), AR, 131072.0, node), _step(_tuned(3, TunedAllReduce.FASTEST), AR, 131072.0, node), rel_tol=1e-12)
    assert math.isclose(_step(_tuned(4), AR, m, node), 2 * 2 * (3 / 4) * m / 1e9, rel_tol=1e-12)
    e = 0.5  # both directions at half rate: the ring and the exchanging rounds cost twice, the one-way sends once
    assert math.isclose(_step(_tuned(3, two_way=e), AR, m, node), (0.75 * 8 / 3 * m / e + 2 * (m / 2) / e + 2 * 1.5 * m) / 1e9, rel_tol=1e-12)
    # a group of 6 (every rank, one host's two members inside it) is coll/han's, not this term's
    assert _step(_tuned(3), AR, m, 0b11) == _step(_tuned(3, TunedAllReduce.FASTEST), AR, m, 0b11)


def test_open_mpi_rabenseifner_threshold_follows_the_fixed_rules_by_group_size():
    """Rabenseifner from 256 KiB below 4 members, from 8 KiB for 4-15, 4 KiB for 16-31, 128 B for 32-63."""
    from p2synth.solver.algebra import PyAlgebra
    from p2synth.solver.open_mpi import open_mpi_rabenseifner_all_reduce

    alg = PyAlgebra()
    for k, least in ((2, 262144), (3, 262144), (4, 8192), (15, 8192), (16, 4096), (31, 4096), (32, 128), (63, 128),
                     (64, 262144), (300, 4096), (1000, 16384), (5000, 32768)):
        assert open_mpi_rabenseifner_all_reduce(alg, float(k), float(least))
        assert not open_mpi_rabenseifner_all_reduce(alg, float(k), float(least) - 1.0)


def _one_per_host(tuned_all_reduce=None, tuned_trees=None, racks=2, nodes=2):
    # rack x node, one rank per node: every step one member per host, coll/tuned's; the rack uplink (0.5 GB/s)
    # shared by its nodes, no latency, no reduction compute
    h = Hierarchy(levels=(Level(name="rack", count=racks, bandwidth_GBps=0.5, uplink_GBps=0.5, latency_us=0.0),
                          Level(name="node", count=nodes, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=0.0),
                          Level(name="core", count=1)),
                  library=OPEN_MPI, tuned_all_reduce=tuned_all_reduce, tuned_trees=tuned_trees)
    return Placement(h, (Axis(name="data", size=racks * nodes),), ((racks, nodes, 1),))


def test_open_mpi_tuned_broadcast_and_reduce_run_the_fixed_decisions_algorithm():
    """A broadcast and a reduce over 4 members, one per host in rank order (rack digit first): coll/tuned's fixed
    decision, unsegmented. From 1 MiB the broadcast is a chain: 1 hop across the racks (0.5 GB/s) and 2 inside
    them (1 GB/s), one after another: 4m/1e9. From 8 KiB to 1 MiB it is the linear fan-out: the root pushes 2 copies
    out of its rack and 3 out of its node at once, the slower 4m/1e9. The reduce from 1 MiB is the linear fan-in
    (the same 4m/1e9), from 512 KiB to 1 MiB the binomial tree as the simulator prices it (its rack round charged
    to both nodes of a rack, 4m, then m). Over 4 racks of one node the chain's 3 hops all cross the racks,
    6m/1e9, where ``tuned_trees: fastest`` (the price before) takes the faster of the binomial tree and the
    scatter-based schedule, the latter: a scatter and an allgather, 2 x (3/4) m at 0.5 GB/s, 3m/1e9."""
    both = 0b11
    for m in (float(1 << 22), float(1 << 20)):
        assert math.isclose(_step(_one_per_host(), B, m, both), 4 * m / 1e9, rel_tol=1e-12)  # the chain
        assert math.isclose(_step(_one_per_host(), R, m, both), 4 * m / 1e9, rel_tol=1e-12)  # the linear fan-in
    m = float(1 << 19)
    assert math.isclose(_step(_one_per_host(), B, m, both), 4 * m / 1e9, rel_tol=1e-12)  # the linear fan-out
    assert math.isclose(_step(_one_per_host(), R, m, both), 5 * m / 1e9, rel_tol=1e-12)  # binomial
    m = float(1 << 22)
    assert math.isclose(_step(_one_per_host(racks=4, nodes=1), B, m, 0b1), 6 * m / 1e9, rel_tol=1e-12)
    assert math.isclose(_step(_one_per_host(tuned_trees=TunedTrees.FASTEST, racks=4, nodes=1), B, m, 0b1),
                        3 * m / 1e9, rel_tol=1e-12)


def test_open_mpi_rabenseifner_runs_its_halving_rounds_from_the_least_significant_digit():
    """Open MPI's Rabenseifner halves the vector with the next rank first (distance doubling): over rack 2 x node 2
    in rank order (rack digit first) the node rounds move m/2 and the rack rounds m/4, each way, in both halves.
    The rack uplink carries its two nodes' 2 x 2 x m/4: 2m/1e9 at 0.5 GB/s; each node's link 2 x 3m/4 at 1 GB/s:
    1.5m/1e9; the slower, 2m/1e9. Priced with the outermost level first (``rules``, the price before) the rack
    rounds carry m/2: 4m/1e9."""
    m, both = float(1 << 22), 0b11
    assert math.isclose(_step(_one_per_host(), AR, m, both), 2 * m / 1e9, rel_tol=1e-12)
    assert math.isclose(_step(_one_per_host(TunedAllReduce.RULES), AR, m, both), 4 * m / 1e9, rel_tol=1e-12)


def test_the_fixed_decision_tables_pick_what_open_mpi_5_picks():
    """Rows of coll_tuned_decision_fixed.c (v5.0.x), at their boundaries."""
    from p2synth.solver.open_mpi import TUNED_BROADCAST, TUNED_REDUCE, Tree, tuned_tree

    for k, nbytes, tree in ((2, 1 << 20, Tree.LINEAR), (3, (1 << 20) - 1, Tree.BINOMIAL), (3, 131072, Tree.CHAIN),
                            (4, 8192, Tree.LINEAR), (4, 8191, Tree.BINOMIAL), (7, 1 << 20, Tree.CHAIN),
                            (8, 32768, Tree.LINEAR), (15, 32767, Tree.BINOMIAL), (16, 1 << 20, Tree.SCATTER_ALLGATHER),
                            (31, (1 << 20) - 1, Tree.BINOMIAL), (32, 1 << 24, Tree.FASTEST)):
        assert tuned_tree(TUNED_BROADCAST, k, nbytes) is tree, (k, nbytes)
    for k, nbytes, tree in ((2, 1 << 20, Tree.CHAIN), (3, 262143, Tree.LINEAR), (4, 1 << 20, Tree.LINEAR),
                            (4, (1 << 20) - 1, Tree.BINOMIAL), (5, 262144, Tree.LINEAR), (6, 4096, Tree.CHAIN),
                            (8, 1 << 24, Tree.BINOMIAL), (31, 1, Tree.BINOMIAL), (64, 1 << 24, Tree.FASTEST)):
        assert tuned_tree(TUNED_REDUCE, k, nbytes) is tree, (k, nbytes)


def test_z3_minimises_the_coll_han_term_exactly():
    """Where coll/han and coll/tuned run the steps (Open MPI; node 2 x core 2, node 4 x core 2, rack 2 x node 2 x core 2
    and one rank per node; below, at and above one 64 KiB segment): Z3's top 3 over the sketch cost what the explicit search's top 3 cost, and Z3's
    unsat proves that list."""
    rack = Hierarchy(levels=(Level(name="rack", count=2, bandwidth_GBps=0.5, uplink_GBps=0.5, latency_us=30.0, duplex_efficiency=0.7),
                             Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                             Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=1.0)), library=OPEN_MPI)
    three = Placement(rack, (Axis(name="data", size=8),), ((2, 2, 2),))
    cases = [(p, op, m) for p in (_han_flat(nodes=2), _han_flat(nodes=4)) for op in (AR, R, B, AG)
             for m in (16384.0, 65536.0, float(1 << 24))] + [(three, AR, float(1 << 24))]
    # six leaders, two per rack: libnbc's binomial broadcast, its rounds priced per leader order (binomial_rounds)
    six = Placement(_racks(3, 2, 0.25), (Axis(name="data", size=12),), ((3, 2, 2),))
    cases += [(six, op, float(1 << 22)) for op in (AR, B)]
    # three hosts: coll/tuned's Rabenseifner folding its third member in and out, on the steps over the node cell
    cases += [(_han_flat(nodes=3), AR, m) for m in (float(1 << 17), float(1 << 22))]
    # coll/tuned's broadcast and reduce by its fixed decision, and Rabenseifner's rounds in rank order, on a group of
    # one member per host over two network levels (and the whole of rack 2 x node 2 x core 2, whose other steps they price)
    cases += [(p, op, m) for p in (_one_per_host(), _one_per_host(racks=4, nodes=2)) for op in (AR, R, B)
              for m in (float(1 << 19), float(1 << 22))] + [(three, op, float(1 << 22)) for op in (R, B)]
    assert_z3_ranks_as_the_search(cases)


def assert_z3_ranks_as_the_search(cases) -> None:
    """For each (placement, op, message bytes): Z3's best 3 programs under the simulator cost what the explicit
    search's best 3 cost, and Z3 proves them the best."""
    from p2synth.encodings.programs import ProgramSketch
    from p2synth.hierarchies.statespace import state_space

    for p, op, m in cases:
        n = len(Request(frozenset({0}), op).reduced_cells(p))
        model = Simulator(p, Request(frozenset({0}), op), m)
        costs = edge_costs(state_space(op, n), model)
        found = cheapest_programs(costs, cost_to_go(costs, 3), 3)
        z3_top = ProgramSketch(op, n, 3, model.step_time).top(3)
        assert [round(r.cost, 12) for r in z3_top] == [round(c, 12) for c, _ in found[:len(z3_top)]], (p, op, m)
        ranked, proved = ProgramSketch(op, n, 3, model.step_time).prove_top([prog for _, prog in found])
        assert proved


def test_shared_uplink_slows_concurrent_groups():
    # node 2 x core 4, one NIC per node (1 GB/s) shared by its 4 cores; AR over data@node (4 groups at once)
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=4, bandwidth_GBps=10.0, latency_us=1.0)))
    p = Placement(h, (Axis(name="data", size=2), Axis(name="model", size=4)), ((2, 1), (1, 4)))
    sim = Simulator(p, Request(frozenset({0})), float(1 << 26))
    t = step_seconds(sim, abstract.start_state(AR, 1), AR, 1, 1)
    m = float(1 << 26)
    # with k = 2 both schedules move m per device; 4 devices share the 1 GB/s uplink, so 4m/1e9;
    # recursive doubling needs one round (alpha), the two-phase schedule two
    assert math.isclose(t, ALPHA + 4 * m / 1e9, rel_tol=1e-12)


def _random_placement(draw):
    counts = [draw(st.sampled_from([2, 4])) for _ in range(2)]
    h = Hierarchy(levels=(
        Level(name="node", count=counts[0], bandwidth_GBps=draw(st.sampled_from([0.1, 1.0])), latency_us=50,
              uplink_GBps=draw(st.sampled_from([None, 0.2])), duplex_efficiency=draw(st.sampled_from([None, 0.5]))),
        Level(name="core", count=counts[1], bandwidth_GBps=draw(st.sampled_from([2.0, 10.0])), latency_us=2),
    ), reduce_GBps=draw(st.sampled_from([None, 1.0, 4.0])), step_overhead_us=draw(st.sampled_from([None, 20.0])),
       library=draw(st.sampled_from([None, OPEN_MPI])), reduce_scatter=draw(st.sampled_from([None, *ReduceScatterRun])))
    return Placement(h, (Axis(name="data", size=counts[0] * counts[1]),), ((counts[0], counts[1]),))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_z3_minimises_the_simulator_exactly(data):
    p = _random_placement(data.draw)
    col = data.draw(st.sampled_from([AR, RS, AG, R]))
    size = data.draw(st.sampled_from([1 << 12, 1 << 20, 1 << 26]))
    req = Request(frozenset({0}), col)
    sim = Simulator(p, req, size)
    oracle = oracles.cheapest(col, 2, 3, lambda s, op, S: step_seconds(sim, s, op, S, 2))
    sol = solve(p, req, size, 3, top=1, model_kind="simulator")
    assert sol.optimal and math.isclose(sol.best.cost_s, oracle[0], rel_tol=1e-9)


def _flat_pair():
    # node 2 x core 2, one 1 GB/s NIC per node shared by its 2 cores; shared memory 10 GB/s
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=1.0)))
    return Placement(h, (Axis(name="data", size=4),), ((2, 2),))


def test_a_flat_group_over_two_levels_pushes_every_members_traffic_through_the_nic():
    p, m = _flat_pair(), float(1 << 26)
    lat = 10e-6 + 1e-6  # log2(2) rounds at each level
    # Rabenseifner in rank order: the first halving round (and the last doubling round) pairs ranks on the
    # other node, m/2 each; both members of a node send through its NIC: 2 * 2 * (m/2) / 1 GB/s.
    # (Hierarchy-aware it would be one member's worth, 1.5 m / 1 GB/s.) The core rounds (1.5 m at 10 GB/s) hide.
    ring = 2 * lat + 2 * m / 1e9
    # recursive doubling: the node round moves m per member (2m through the NIC), the core round m at 10 GB/s
    rd = lat + 2 * m / 1e9 + m / 10e9
    assert ring < rd
    sim = Simulator(p, Request(frozenset({0})), m)
    assert math.isclose(step_seconds(sim, abstract.start_state(AR, 2), AR, 0b11, 2), ring, rel_tol=1e-12)
    # reduce_scatter: one halving phase, m/2 per member across the NIC, two members
    sim = Simulator(p, Request(frozenset({0}), RS), m)
    assert math.isclose(step_seconds(sim, abstract.start_state(RS, 2), RS, 0b11, 2), lat + m / 1e9, rel_tol=1e-12)


def test_a_hierarchy_aware_group_sends_each_units_share_once():
    p, m = _flat_pair(), float(1 << 26)
    lat = 10e-6 + 1e-6
    # V = 1.5 m per member, but only one member's worth leaves each node: V / 1 GB/s
    ring = 2 * lat + 1.5 * m / 1e9
    sim = Simulator(p, Request(frozenset({0})), m, hierarchy_aware=True)
    assert math.isclose(step_seconds(sim, abstract.start_state(AR, 2), AR, 0b11, 2), ring, rel_tol=1e-12)


def test_single_level_steps_do_not_depend_on_the_flat_term():
    p, m = _flat_pair(), float(1 << 22)
    for op in (AR, RS):
        a = Simulator(p, Request(frozenset({0}), op), m)
        b = Simulator(p, Request(frozenset({0}), op), m, hierarchy_aware=True)
        for S in (0b01, 0b10):
            st0 = abstract.start_state(op, 2)
            assert step_seconds(a, st0, op, S, 2) == step_seconds(b, st0, op, S, 2)


def test_all_to_all_is_the_shared_exchange_time_plus_the_step_overhead():
    # node 2 x core 4, the 4 cores of a node share its 1 GB/s NIC; one data axis over both levels
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=4, bandwidth_GBps=10.0, latency_us=1.0)), step_overhead_us=5.0)
    p = Placement(h, (Axis(name="data", size=8),), ((2, 4),))
    m = float(1 << 20)
    sim = Simulator(p, Request(frozenset({0}), A2A), m)
    start = abstract.start_state(A2A, 2)
    # flat: 4 peers in the other node, 3 in this one; half of each device's data leaves the node, 4 devices on the NIC
    flat = 4 * 10e-6 + 3 * 1e-6 + max(m / 2 * 4 / 1e9, 7 / 8 * m / 10e9) + OVERHEAD
    assert math.isclose(step_seconds(sim, start, A2A, 0b11, 2), flat, rel_tol=1e-12)
    across = 10e-6 + m / 2 * 4 / 1e9 + OVERHEAD
    assert math.isclose(step_seconds(sim, start, A2A, 0b01, 2), across, rel_tol=1e-12)
