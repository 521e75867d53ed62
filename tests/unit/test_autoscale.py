"""OTD's autoscaling decisions (scheduler_otd.otd.autoscale), without a cluster."""

from __future__ import annotations

from scheduler_otd.otd import Decision, autoscale

PLACEMENT = {"split:0": "w1", "split:1": "w2", "count:0": "w1", "count:1": "w2", "sentences:0": "w1"}
BOLTS = {"split", "count"}
CAPACITY = {"w1": 1.0, "w2": 1.0}


def test_case_2_scales_out_the_component_that_loads_the_overloaded_workers_most() -> None:
    decision = Decision(2, classes={"w1": "high", "w2": "high"})
    cpu = {"split:0": 0.2, "split:1": 0.2, "count:0": 0.7, "count:1": 0.6, "sentences:0": 0.9}
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, {}, free_slots=1, low_since={}, now=0.0)
    assert step is not None and (step.component, step.parallelism, step.workers) == ("count", 3, 3)
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, {}, free_slots=0, low_since={}, now=0.0)
    assert step is not None and step.workers is None, "no free slot: into the workers it has"


def test_an_idle_component_is_scaled_in_only_after_the_cool_down() -> None:
    decision = Decision(4, classes={"w1": "normal", "w2": "normal"})
    cpu = {"split:0": 0.05, "split:1": 0.05, "count:0": 0.4, "count:1": 0.4}
    low_since: dict[str, float] = {}
    conf = {"otd.cpu.low": 0.5, "otd.autoscale.cooldown.secs": 30}
    assert autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=100.0) is None
    assert set(low_since) == {"split"}, "count would use 0.8 of a core on one executor: not idle"
    assert autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=120.0) is None
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, CAPACITY, conf, 0, low_since, now=131.0)
    assert step is not None and (step.component, step.parallelism) == ("split", 1)
    busy = {**cpu, "split:0": 0.6}
    assert autoscale(decision, PLACEMENT, BOLTS, busy, CAPACITY, conf, 0, low_since, now=200.0) is None
    assert "split" not in low_since, "busy again: the idle streak starts over"


def test_capped_workers_count_their_cap_as_the_capacity() -> None:
    decision = Decision(2, classes={"w1": "high", "w2": "normal"})
    cpu = {"split:0": 0.05, "split:1": 0.05, "count:0": 0.15, "count:1": 0.1}
    step = autoscale(decision, PLACEMENT, BOLTS, cpu, {"w1": 0.2, "w2": 0.2}, {}, 0, {}, now=0.0)
    assert step is not None and step.component == "count"
