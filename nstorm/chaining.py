"""Which executors may be chained (Nephele's dynamic task chaining, Flink's operator chains).

A chained executor runs in its upstream executor's thread: the upstream hands it each batch
by a call instead of a queue put and a thread wake-up (worker/chaining.py does it live). That
is only right when the downstream executor's *only* input is that one upstream executor, on
one worker, so that nothing about routing changes. Either its component's single input is
``local_or_shuffle`` from the upstream component, and its worker holds exactly one executor
of the upstream component, while every worker that holds an upstream executor also holds a
downstream one (else that upstream executor would shuffle to every downstream executor); or,
with any grouping, each component runs exactly one executor and both in one worker (one to
one: every tuple goes to that one executor whatever the grouping says, as in bytewax's one
process). Shuffle and fields groupings are never changed to make a chain: a rescale of either
end ends the chain first. A component opts out with
``chainable = False`` (Flink's ``disableChaining``); windowed bolts, bolts with tick tuples
and components in a rescale are never chained.

With ``topology.chaining`` every such pair is chained from the first plan (Flink chains at
submit), not only when a latency constraint asks for it.

The plan carries the chains (``chains``: downstream executor -> upstream executor); Nimbus
keeps only those that still hold in every plan it writes (:func:`kept_chains`), so a moved
executor leaves its chain in the very plan that moves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nstorm.plan import Plan
from nstorm.topology import LOCAL_OR_SHUFFLE, component_of

__all__ = ["chainable_channel", "every_pointwise_pair", "kept_chains", "pointwise_pairs"]



def chainable_channel(definition: Mapping[str, Any], upstream: str, downstream: str) -> str | None:
    """How the channel ``upstream>downstream`` may be pointwise (placement aside): ``"local"``
    (``local_or_shuffle``: an executor's worker-mate), ``"one"`` (another grouping: only while
    one executor of each runs), None if never."""
    spec = (definition.get("components") or {}).get(downstream)
    if not spec or spec.get("kind") != "bolt" or spec.get("chainable") is False:
        return None
    if spec.get("tick_secs") or spec.get("window"):
        return None
    inputs = spec.get("inputs") or []
    if len(inputs) != 1 or inputs[0].get("component") != upstream:
        return None
    return "local" if inputs[0].get("grouping") == LOCAL_OR_SHUFFLE else "one"


def pointwise_pairs(definition: Mapping[str, Any], plan: Plan, upstream: str, downstream: str) -> dict[str, str]:
    """Downstream executor -> the one upstream executor that feeds it, for every pair of the channel
    that may be chained in ``plan`` (empty if the channel may not be chained at all)."""
    kind = chainable_channel(definition, upstream, downstream)
    if kind is None:
        return {}
    if upstream in plan.rescales or downstream in plan.rescales:
        return {}
    ups: dict[str, list[str]] = {}
    downs: dict[str, list[str]] = {}
    for e, w in plan.executors.items():
        c = component_of(e)
        if c == upstream:
            ups.setdefault(w, []).append(e)
        elif c == downstream:
            downs.setdefault(w, []).append(e)
    if kind == "one":
        up = [e for here in ups.values() for e in here]
        down = [e for here in downs.values() for e in here]
        if len(up) != 1 or len(down) != 1 or plan.executors[up[0]] != plan.executors[down[0]]:
            return {}  # more than one executor at either end (the grouping picks), or two workers
        return {down[0]: up[0]}
    if any(w not in downs for w in ups):
        return {}  # an upstream executor with no local downstream one shuffles to all of them
    pairs = {}
    for w, here in downs.items():
        feeding = ups.get(w, [])
        if len(feeding) == 1:
            for d in here:
                pairs[d] = feeding[0]
    return pairs


def kept_chains(definition: Mapping[str, Any], plan: Plan) -> dict[str, str]:
    """The chains of ``plan`` that still hold in it (none with an executor this version moves)."""
    if not plan.chains:
        return {}
    moving = {e for e, m in plan.moved.items() if m.version == plan.version} | set(plan.retiring)
    kept = {}
    for d, u in plan.chains.items():
        if d in moving or u in moving:
            continue
        if pointwise_pairs(definition, plan, component_of(u), component_of(d)).get(d) == u:
            kept[d] = u
    return kept


def every_pointwise_pair(definition: Mapping[str, Any], plan: Plan) -> dict[str, str]:
    """The chains of every channel of ``plan`` that may be chained (``topology.chaining``: Flink
    chains its operators at submit; the even scheduler places a ``local_or_shuffle`` channel's ends
    in one worker, so they are chained from the first plan)."""
    chains: dict[str, str] = {}
    for name, spec in (definition.get("components") or {}).items():
        inputs = spec.get("inputs") or []
        if len(inputs) == 1:
            chains.update(pointwise_pairs(definition, plan, inputs[0].get("component"), name))
    return chains
