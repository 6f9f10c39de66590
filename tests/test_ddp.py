"""The DDP hook's choices and attach-time checks, without torch (tests/test_ddp_torch.py trains for real)."""

import copy
import subprocess
import sys

import pytest

from p2synth.hierarchies.plan_file import parse_plan_file
from p2synth.solver.exports.buckets import HookError, bucket_plan, check_world
from tests.test_spec_sizes import SPEC, plan_of

# data 4 x tensor 2 on node 2 x core 4: a gradient all-reduce at two sizes, a tensor reduce-scatter
SPLIT = {**SPEC, "axes": [{"name": "data", "size": 4}, {"name": "tensor", "size": 2}],
         "workload": [{"name": "grad_allreduce", "axes": ["data"], "message_bytes": [4096, 1048576]},
                      {"name": "tp", "axes": ["tensor"], "collective": "reduce_scatter", "message_bytes": 4096}],
         "placements": [[[2, 2], [1, 2]]]}


@pytest.fixture(scope="module")
def document() -> dict:
    """The plan of SPEC (8 ranks, data 8): grad_allreduce at 4 KiB, 1 MiB and 25 MiB, and loss."""
    return plan_of(SPEC)


@pytest.fixture(scope="module")
def split() -> dict:
    """The plan of SPLIT: data=[node 2, core 2], tensor=[core 2]."""
    return plan_of(SPLIT)


def hook_error(document: dict, placement: int = 0, request: str | None = "grad_allreduce") -> str:
    """The message of the HookError that choosing the programs raises."""
    with pytest.raises(HookError) as info:
        bucket_plan(parse_plan_file(document), placement, request)
    return str(info.value)


def test_each_bucket_runs_its_size_or_the_nearest_planned_size_by_ratio(document):
    plan = bucket_plan(parse_plan_file(document), 0, "grad_allreduce")
    assert [s.message_bytes for s in plan.sizes] == [4096, 1 << 20, 25 << 20]
    cases = {4096: 4096, 1: 4096, 0: 4096, 65535: 4096, 65536: 1 << 20,  # 65536 is as far from both: the larger
             5 << 20: 1 << 20, 6 << 20: 25 << 20, 1 << 40: 25 << 20}
    assert {n: plan.choose(n).message_bytes for n in cases} == cases
    assert [n for n in cases if plan.covers(n)] == [4096]


def test_a_bucket_pads_to_every_chunk_and_piece_of_its_program(document):
    plan = bucket_plan(parse_plan_file(document), 0, "grad_allreduce")
    assert [(s.name, s.group_size, s.program.pipeline, s.multiple) for s in plan.sizes] == [
        ("grad_allreduce_4096", 8, 1, 8), ("grad_allreduce_1048576", 8, 16, 128), ("grad_allreduce_26214400", 8, 16, 128)]
    assert plan.describe().startswith("placement 0 (data=[node 2, core 4]), request grad_allreduce: 4,096 bytes: "
                                      "RS(data@core) -> AR(data@node) -> AG(data@core); 1,048,576 bytes: ")


def test_a_size_without_programs_runs_the_default(document):
    edited = copy.deepcopy(document)
    edited["placements"][0]["requests"][1]["programs"] = []
    plan = bucket_plan(parse_plan_file(edited), 0, "grad_allreduce")
    assert plan.sizes[1].program.text(plan.placement) == "AR(data@node,data@core)" and plan.sizes[1].multiple == 8


def test_a_size_whose_program_is_the_default_is_said_to_run_it(document):
    edited = copy.deepcopy(document)
    edited["placements"][0]["requests"][1]["programs"] = []
    plan = bucket_plan(parse_plan_file(edited), 0, "grad_allreduce")
    assert [plan.runs_default(s) for s in plan.sizes] == [False, True, False]


class _Future:
    """torch.futures.Future's part the hook uses: the worker's set_result and set_exception, then() on a finished
    all-reduce's future (the direct path), and value() and wait() for the test. `chained`: then() made it."""

    def __init__(self, devices=None):
        import threading

        self._done, self._value, self._error, self.chained = threading.Event(), None, None, False

    @classmethod
    def done(cls, value, chained=False):
        """A future that already holds `value`."""
        future = cls()
        future.set_result(value)
        future.chained = chained
        return future

    def set_result(self, value):
        self._value = value
        self._done.set()

    def set_exception(self, error):
        self._error = error
        self._done.set()

    def wait(self, timeout: float = 10.0):
        assert self._done.wait(timeout), "the bucket was never reduced"
        if self._error is not None:
            raise self._error
        return self._value

    def value(self):
        return self.wait(0)

    def then(self, callback):
        return _Future.done(callback(self), chained=True)


class _Buffer:
    """A bucket's flat tensor stand-in that records its in-place division."""

    is_cuda, device = False, "cpu"

    def __init__(self, nbytes: int):
        self.nbytes, self.divided_by = nbytes, None

    def numel(self):
        return self.nbytes // 4

    def element_size(self):
        return 4

    def div_(self, d):
        self.divided_by = d
        return self


def test_a_size_whose_pick_is_ddps_all_reduce_runs_it_on_the_calling_thread(document, monkeypatch):
    """On a fake torch.distributed: a 1 MiB bucket, whose planned program is the default, is divided and started as
    one asynchronous all_reduce on the hook's direct group from the calling thread (as DDP's own hook does), the
    future yields the bucket, and it is counted; the worker thread never sees it."""
    import types

    from p2synth.solver.exports.ddp import PlanHook

    calls = []
    fake = types.ModuleType("torch.distributed")
    fake.all_reduce = lambda buffer, group, async_op: calls.append((buffer, group, async_op)) or types.SimpleNamespace(
        get_future=lambda: _Future.done([buffer]))
    torch = types.ModuleType("torch")
    torch.distributed = fake
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    edited = copy.deepcopy(document)
    edited["placements"][0]["requests"][1]["programs"] = []
    plan = bucket_plan(parse_plan_file(edited), 0, "grad_allreduce")
    hook = PlanHook(plan, {}, mesh=None, divisor=8, direct=(frozenset({1 << 20}), "direct-group"))
    bucket = types.SimpleNamespace(buffer=lambda: _Buffer(1 << 20))
    future = hook(None, bucket)
    (buffer, group, async_op), = calls
    assert (group, async_op, buffer.divided_by) == ("direct-group", True, 8)
    assert future.value() is buffer and (hook.reduced, hook.direct) == (1, 1) and hook._jobs.empty()
    hook.close()


def test_the_only_request_is_the_default_choice(document, split):
    single = {**document, "workload": document["workload"][:3],
              "placements": [{**p, "requests": p["requests"][:3]} for p in document["placements"]]}
    assert bucket_plan(parse_plan_file(single), 0, None).request == "grad_allreduce"
    assert hook_error(document, request=None) == "the plan has 2 requests (grad_allreduce, loss); choose one by name"


@pytest.mark.parametrize("placement,name,line", [
    (1, "grad_allreduce", "placement index 1 out of range: the plan has 1 placement(s)"),
    (0, "grads", "no request 'grads' in the plan; its requests: grad_allreduce, tp"),
    (0, "tp", "request 'tp' is a reduce_scatter, not an all_reduce: a DDP hook all-reduces gradient buckets"),
])
def test_bad_choices_fail_with_one_line(split, placement, name, line):
    assert hook_error(split, placement, name) == line


def test_the_job_must_have_the_plans_devices_and_ddps_group_must_be_the_reduction_group(split):
    plan = bucket_plan(parse_plan_file(split), 0, "grad_allreduce")
    assert [plan.group(r) for r in (0, 1, 5)] == [(0, 2, 4, 6), (1, 3, 5, 7), (1, 3, 5, 7)]
    check_world(plan, 8, 5, (7, 5, 3, 1))  # fits: any order
    with pytest.raises(HookError) as info:
        check_world(plan, 16, 0, tuple(range(16)))
    assert str(info.value) == ("the plan's placement 0 is for 8 devices, but the job has world size 16; "
                               "plan for this job's hierarchy")
    with pytest.raises(HookError) as info:
        check_world(plan, 8, 0, tuple(range(8)))  # DDP over the world, the plan's data axis is half of it
    assert str(info.value) == ("request 'grad_allreduce' reduces over data: rank 0 reduces with ranks [0, 2, 4, 6], "
                               "but DDP's process group holds ranks [0, 1, 2, 3, 4, 5, 6, 7]; "
                               "pass DDP's process group, or plan the request over the axes it spans")


def test_importing_the_hook_module_does_not_import_torch():
    code = "import sys, p2synth.solver.exports.ddp; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


class _Torch:
    """A fake torch for PlanHook's worker and guard on one rank: Futures, the guard's small tensors, and a
    torch.distributed whose all_reduce records (group, async_op) and sleeps `default_s` on the guard's group."""

    def __init__(self, default_s: float = 0.0):
        import threading
        import types

        calls = self.calls = []
        self.float64 = "float64"
        self.futures = types.SimpleNamespace(Future=_Future)
        lock = threading.Lock()

        def all_reduce(tensor, op=None, group=None, async_op=False):
            import time

            with lock:
                calls.append((group, "max" if op == "MAX" else "sum", async_op))
            if group == "guard-group" and op is None:
                time.sleep(default_s)
            return types.SimpleNamespace(get_future=lambda: _Future.done([tensor])) if async_op else None

        self.distributed = types.SimpleNamespace(all_reduce=all_reduce, ReduceOp=types.SimpleNamespace(MAX="MAX"))

    @staticmethod
    def tensor(values, dtype=None, device=None):
        import types

        return types.SimpleNamespace(tolist=lambda: list(values))


class _Bucket:
    def __init__(self, nbytes: int):
        self._buffer = _Buffer(nbytes)
        self._buffer.is_cuda, self._buffer.data_ptr = False, lambda: id(self._buffer)

    def buffer(self):
        return self._buffer


def _guarded_hook(document, monkeypatch, program, default_s: float = 0.0):
    """A PlanHook over the 1 MiB size of `document` with a 1-trial guard on a fake torch: the size's function is
    `program`, DDP's all-reduce on the guard's group takes `default_s`."""
    from p2synth.solver.exports.ddp import PlanHook
    from p2synth.solver.exports.guard import Guard

    torch = _Torch(default_s)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", torch.distributed)
    plan = bucket_plan(parse_plan_file(document), 0, "grad_allreduce")
    hook = PlanHook(plan, {"grad_allreduce_1048576": program}, mesh=None, divisor=8,
                    guard=(Guard(1), "guard-group"), direct=(frozenset(), "direct-group"))
    return hook, torch.calls


def test_after_its_trials_a_size_whose_guard_kept_ddps_all_reduce_runs_it_on_the_calling_thread(document, monkeypatch):
    """1 trial each: the plan's program (slow), then DDP's all-reduce on the guard's group, then the agreement (a MAX
    all-reduce); the third and fourth buckets, started before the first two are done, wait for the decision and
    run DDP's all-reduce asynchronously on the direct group from the calling thread, as a size whose pick is DDP's
    all-reduce does."""
    import time

    ran = []
    hook, calls = _guarded_hook(document, monkeypatch, lambda x, mesh: time.sleep(0.2) or ran.append(x) or x)
    futures = [hook(None, _Bucket(1 << 20)) for _ in range(4)]  # the third waits here for the decision
    assert [f.chained for f in futures] == [False, False, True, True]  # the worker's two, then the direct path's
    results = [f.wait() for f in futures[:2]] + [f.value() for f in futures[2:]]
    assert calls == [("guard-group", "sum", False), ("guard-group", "max", False),
                     ("direct-group", "sum", True), ("direct-group", "sum", True)]
    assert len(ran) == 1 and all(r.divided_by == 8 for r in results)
    assert (hook.reduced, hook.direct) == (4, 2) and hook.decisions()[1 << 20]["kept"] == "default"
    hook.close()


def test_after_its_trials_a_size_whose_guard_kept_the_plan_stays_on_the_worker(document, monkeypatch):
    ran = []
    hook, calls = _guarded_hook(document, monkeypatch, lambda x, mesh: ran.append(x) or x, default_s=0.2)
    futures = [hook(None, _Bucket(1 << 20)) for _ in range(4)]
    assert not any(f.chained for f in futures) and all(f.wait() for f in futures)
    assert calls == [("guard-group", "sum", False), ("guard-group", "max", False)]
    assert len(ran) == 3 and (hook.reduced, hook.direct) == (4, 0) and hook.decisions()[1 << 20]["kept"] == "plan"
    hook.close()


def test_a_failing_trial_never_leaves_a_later_bucket_waiting_for_a_decision(document, monkeypatch):
    import threading

    def broken(x, mesh):
        raise RuntimeError("the program failed")

    hook, _ = _guarded_hook(document, monkeypatch, broken)
    first = hook(None, _Bucket(1 << 20))
    with pytest.raises(RuntimeError, match="the program failed"):
        first.wait()
    later = []
    caller = threading.Thread(target=lambda: later.extend(hook(None, _Bucket(1 << 20)) for _ in range(3)), daemon=True)
    caller.start()
    caller.join(10)
    assert not caller.is_alive() and len(later) == 3
    hook.close()


def _fake_dist(monkeypatch, world: int = 8):
    import types

    fake = types.ModuleType("torch.distributed")
    fake.is_initialized = lambda: True
    fake.get_world_size, fake.get_rank = (lambda group=None: world), (lambda group=None: 0)
    fake.get_process_group_ranks = lambda group: list(range(world))
    fake.group = types.SimpleNamespace(WORLD="world")
    torch = types.ModuleType("torch")
    torch.distributed = fake
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)


class _Model:
    def __init__(self):
        self.hooks = []

    def register_comm_hook(self, state, hook):
        self.hooks.append((state, hook))


def test_a_plan_that_keeps_ddps_all_reduce_for_every_size_attaches_no_hook(document, monkeypatch):
    """Every size's program the default: register_p2synth_hook checks the plan against the job, attaches nothing
    (DDP keeps its built-in all-reduce) and returns None; with one size running a program it attaches
    p2synth_hook's hook, with the options passed on."""
    import p2synth.solver.exports.ddp as ddp

    _fake_dist(monkeypatch)
    keeps = copy.deepcopy(document)
    for request in keeps["placements"][0]["requests"]:
        if request["name"].startswith("grad_allreduce"):
            request["programs"] = [dict(request["default"])]
    model = _Model()
    assert ddp.register_p2synth_hook(model, parse_plan_file(keeps), request="grad_allreduce") is None
    assert model.hooks == []
    made = []
    monkeypatch.setattr(ddp, "p2synth_hook", lambda *a, **k: made.append((a, k)) or _StubHook())
    hook = ddp.register_p2synth_hook(model, parse_plan_file(document), request="grad_allreduce", guard=False)
    assert model.hooks == [(None, hook)] and made[0][1] == {"guard": False}
    _fake_dist(monkeypatch, world=4)
    with pytest.raises(HookError, match="^the plan.s placement 0 is for 8 devices, but the job has world size 4; "):
        ddp.register_p2synth_hook(_Model(), parse_plan_file(keeps), request="grad_allreduce")


class _StubHook:
    state = None
