"""``benchmarks.tuplepath`` runs its tuple path (a few sentences, no timing asserted) and checks its options."""

from __future__ import annotations

import pytest

from benchmarks.tuplepath import _one, _parse_args


@pytest.mark.parametrize("variant", ["plain", "batched", "noack"])
def test_one_run_times_the_tuple_path(variant: str) -> None:
    res = _one(variant, 10, 200, 1)
    assert res["us_per_sentence"] > 0
    assert res["messages_per_sentence"] == pytest.approx(1.1)  # 1/10 spout batches + 10/10 word batches


def test_an_unknown_variant_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        _parse_args(["--variants", "plain,nope"])
    assert exc.value.code == 2
