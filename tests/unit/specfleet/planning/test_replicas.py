"""Baseline replicas (``specfleet.planning.replicas``): every cell dealt once, one check cell per replica
on the next one, keys of earlier sweeps unchanged, per-server file names."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract.matrix import CellIdentity
from specfleet.planning.replicas import replica_shares, server_name


def _cells(n: int) -> list[CellIdentity]:
    return [CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=float(c),
                         prompt_class="code", sampling="greedy", repeat=0) for c in range(1, n + 1)]


@given(st.integers(1, 30), st.integers(1, 9))
def test_every_cell_once_plus_one_check_per_replica_on_the_next(n: int, replicas: int) -> None:
    cells = _cells(n)
    shares = replica_shares(cells, replicas)
    count = min(n, replicas)
    assert len(shares) == count
    own = [[c for c in share if not c.replica_check] for share in shares]
    assert Counter(c for share in own for c in share) == Counter(cells)
    checks = [c for share in shares for c in share if c.replica_check]
    assert len(checks) == (count if count > 1 else 0)
    for i, share in enumerate(shares):
        assert own[i] == cells[i::count]  # round robin
        if count > 1:  # opens with the previous replica's first cell, measured again
            assert share[0] == own[i - 1][0].model_copy(update={"replica_check": True})


def test_one_replica_is_todays_single_server() -> None:
    cells = _cells(5)
    assert replica_shares(cells, 1) == [cells]


def test_keys_and_labels_of_earlier_sweeps_hold_and_a_check_has_its_own() -> None:
    base = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=4.0,
                        prompt_class="code", sampling="greedy", repeat=1, phase="baseline_end")
    spec = CellIdentity(arm="draft-k2", method="draft_model", k=2, load_mode="rate", load_value=0.5,
                        prompt_class="chat", sampling="t07", repeat=0)
    # computed on main before the field existed
    assert base.key("abc123") == "b9b04a2a7bc6e15f" and spec.key("abc123") == "d823471a03d0f086"
    assert base.label == "baseline / code / c4 / greedy / r1-end"
    check = base.model_copy(update={"replica_check": True})
    assert check.key("abc123") != base.key("abc123")
    assert check.label == "baseline / code / c4 / greedy / r1-end-check"


@pytest.mark.parametrize(("replica", "name"), [(0, "baseline"), (1, "baseline-r1"), (3, "baseline-r3")])
def test_replica_files_are_named_apart(replica: int, name: str) -> None:
    assert server_name("baseline", replica) == name
