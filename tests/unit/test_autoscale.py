"""OTD's autoscaling decisions (scheduler_otd.otd.autoscale), without a cluster."""

from __future__ import annotations

from scheduler_otd.otd import Decision, autoscale

PLACEMENT = {"split:0": "w1", "split:1": "w2", "count:0": "w1", "count:1": "w2", "sentences:0": "w1"}
BOLTS = {"split", "count"}
CAPACITY = {"w1": 1.0, "w2": 1.0}


def test_case_2_scales_out_the_component_that_loads_the_overloaded_workers_most() -> None:
    decision = Decision(2, classes={"w1": "high", "w2": "high"})
    cpu = {"split:0": 0.2, "split:1": 0.2, "count:0": 0.7, "count:1": 0.6, "sentences:0": 0.9}
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, {}, free_slots=1, low_since={}, now=0.0,
                     lagging={"w1"})
    assert step is not None and (step.component, step.parallelism, step.workers) == ("count", 3, 3)
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, {}, free_slots=0, low_since={}, now=0.0,
                     lagging={"w2"})
    assert step is not None and step.workers is None, "no free slot: into the workers it has"


def test_an_idle_component_is_scaled_in_only_after_the_cool_down() -> None:
    decision = Decision(4, classes={"w1": "normal", "w2": "normal"})
    cpu = {"split:0": 0.05, "split:1": 0.05, "count:0": 0.4, "count:1": 0.4}
    low_since: dict[str, float] = {}
    conf = {"otd.cpu.low": 0.5, "otd.autoscale.cooldown.secs": 30}
    assert autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=100.0, lagging=set()) is None
    assert set(low_since) == {"split"}, "count would use 0.8 of a core on one executor: not idle"
    assert autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=120.0, lagging=set()) is None
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=131.0, lagging=set())
    assert step is not None and (step.component, step.parallelism) == ("split", 1)
    busy = {**cpu, "split:0": 0.6}
    assert autoscale(decision, PLACEMENT, BOLTS, busy, CAPACITY, conf, 0, low_since, now=200.0, lagging=set()) is None
    assert "split" not in low_since, "busy again: the idle streak starts over"


def test_capped_workers_count_their_cap_as_the_capacity() -> None:
    decision = Decision(2, classes={"w1": "high", "w2": "normal"})
    cpu = {"split:0": 0.05, "split:1": 0.05, "count:0": 0.15, "count:1": 0.1}
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, {"w1": 0.2, "w2": 0.2}, {}, 0, {}, now=0.0, lagging={"w1"})
    assert step is not None and step.component == "count"


def test_busy_workers_that_keep_up_are_not_scaled_out() -> None:
    """Near a cgroup cap a worker's CPU is high even when it keeps up: only a backlog that is deep
    or grows on a high-load worker scales out (it over-provisioned 2 -> 8 before)."""
    from scheduler_otd.otd import WorkerLoad, behind, classify

    conf = {"otd.queue.high": 16, "otd.queue.growth.high": 2.0}
    loads = {"w1": WorkerLoad(0.95, 0.0, 0.0), "w2": WorkerLoad(0.9, 1.0, -0.5)}
    assert behind(loads, conf) == set() and set(classify(loads, conf).values()) == {"high"}
    decision = Decision(2, classes=classify(loads, conf))
    cpu = {"split:0": 0.2, "split:1": 0.2, "count:0": 0.7, "count:1": 0.6}
    assert autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 1, {}, 0.0, behind(loads, conf)) is None
    lagging = {**loads, "w2": WorkerLoad(0.9, 3.0, 2.5)}  # its backlog grows
    assert behind(lagging, conf) == {"w2"}
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 1, {}, 0.0, behind(lagging, conf))
    assert step is not None and step.component == "count" and "w2" in step.why


def test_no_capped_worker_more_where_the_caps_take_the_machine_s_cores() -> None:
    """Capped workers are never starved (their wait is their throttling): session 33's capped run
    added 0.4-core workers until eight shared two cores. A new capped worker needs a machine
    whose workers' caps (and uncapped workers' CPU) leave room for its cap."""
    from scheduler_otd.otd import WorkerLoad, cap_room, hosts_with_cpu, no_cpu_for_more

    capped = {f"w{i}": WorkerLoad(0.95, 20.0, 3.0, capacity=0.4, wait=1.0, capped=True) for i in range(5)}
    hosts = {w: "10.0.0.1" for w in capped}
    lagging = set(capped)
    machines = {"10.0.0.1": (0.4, 2.0), "10.0.0.2": (0.4, 2.0)}
    assert not cap_room("10.0.0.1", capped, hosts, 0.4, 2.0)  # 5 x 0.4 = 2 cores taken
    assert cap_room("10.0.0.1", {w: capped[w] for w in ("w0", "w1", "w2", "w3")}, hosts, 0.4, 2.0)
    why = no_cpu_for_more(lagging, capped, hosts, ["10.0.0.1", "10.0.0.1"], 0.25, machines)
    assert why is not None and "caps" in why and "10.0.0.1" in why
    assert no_cpu_for_more(lagging, capped, hosts, ["10.0.0.1", "10.0.0.2"], 0.25, machines) is None
    assert hosts_with_cpu(["10.0.0.1", "10.0.0.2"], capped, hosts, 0.25, machines) == ["10.0.0.2"]
    # Without the supervisors' cores (older registrations), or with no free slot, as before.
    assert no_cpu_for_more(lagging, capped, hosts, ["10.0.0.1"], 0.25) is None
    assert no_cpu_for_more(lagging, capped, hosts, [], 0.25, machines) is None
    # An uncapped supervisor's free slot gives a worker a whole core's chance.
    assert no_cpu_for_more(lagging, capped, hosts, ["10.0.0.1"], 0.25, {"10.0.0.1": (0.0, 2.0)}) is None


def test_no_scale_out_where_the_new_executor_would_wait_for_a_cpu_too() -> None:
    """On a saturated machine (every lagging high-load worker's threads wait for a CPU), one
    executor more in a new worker on that machine, or in the workers it has, only adds a thread
    that waits: the round warns instead. A free slot on another node, or a worker that is not
    starved, may have CPU to give: then it scales out as before."""
    from scheduler_otd.otd import WorkerLoad, hosts_with_cpu, no_cpu_for_more

    starved = {"w1": WorkerLoad(0.9, 20.0, 3.0, wait=0.7), "w2": WorkerLoad(0.9, 20.0, 3.0, wait=0.6)}
    hosts = {"w1": "10.0.0.1", "w2": "10.0.0.1"}
    lagging = {"w1", "w2"}
    why = no_cpu_for_more(lagging, starved, hosts, ["10.0.0.1"], 0.25)
    assert why is not None and "10.0.0.1" in why and "w1 0.70" in why
    assert no_cpu_for_more(lagging, starved, hosts, [], 0.25) is not None, "no free slot, every worker starved"
    assert no_cpu_for_more(lagging, starved, hosts, ["10.0.0.2"], 0.25) is None, "a free slot on another machine"
    both = ["10.0.0.1", "10.0.0.2", "10.0.0.1"]  # Nimbus's order: the first free slot is on the starved machine
    assert no_cpu_for_more(lagging, starved, hosts, both, 0.25) is None
    assert hosts_with_cpu(both, starved, hosts, 0.25) == ["10.0.0.2"], "the new worker goes there first"
    calm = {**starved, "w2": WorkerLoad(0.9, 20.0, 3.0, wait=0.1)}
    assert no_cpu_for_more({"w1"}, calm, hosts, [], 0.25) is None, "w2 has CPU to give"
    assert no_cpu_for_more(lagging, calm, hosts, ["10.0.0.1"], 0.25) is None, "w2 lags but is not starved"
    capped = {w: WorkerLoad(0.9, 20.0, 3.0, capacity=0.5, wait=2.0, capped=True) for w in starved}
    assert no_cpu_for_more(lagging, capped, hosts, ["10.0.0.1"], 0.25) is None, "a cgroup cap's wait is its throttling"

    decision = Decision(2, classes={"w1": "high", "w2": "high"}, warning="resources are short")
    cpu = {"split:0": 0.2, "split:1": 0.2, "count:0": 0.7, "count:1": 0.6}
    placement = {"split:0": "w1", "split:1": "w2", "count:0": "w1", "count:1": "w2"}
    why = no_cpu_for_more(lagging, starved, hosts, ["10.0.0.1"], 0.25)
    assert autoscale(decision, placement, BOLTS, cpu, CAPACITY, {}, 1, {}, 0.0, lagging, why) is None
    assert decision.warning == why
    step = autoscale(decision, placement, BOLTS, cpu, CAPACITY, {}, 1, {}, 0.0, lagging, None)
    assert step is not None and step.component == "count"
