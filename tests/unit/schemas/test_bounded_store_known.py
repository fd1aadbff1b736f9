"""`store_known`: the C store a hot path uses for a key already in a `Bounded` map, or a new one below its cap,
the same as `m[k] = v`."""

from __future__ import annotations

from trainguard.schemas.bounded import Bounded, store_known


def _filled() -> Bounded[int, str]:
    m: Bounded[int, str] = Bounded(3)
    for k in (1, 2, 3, 4):  # 1 is evicted
        m[k] = "x"
    return m


def test_a_known_key_is_stored_in_place_as_by_setitem() -> None:
    by_store, by_setitem = _filled(), _filled()
    store_known(by_store, 3, "y")
    by_setitem[3] = "y"
    assert list(by_store.items()) == list(by_setitem.items()) == [(2, "x"), (3, "y"), (4, "x")]
    assert by_store.evicted == by_setitem.evicted == 1


def test_the_hang_detector_keeps_a_known_rank_in_its_place() -> None:
    """What hang relies on: a rank that steps again keeps its position, so the oldest rank is still first out."""
    m = _filled()
    store_known(m, 2, "again")
    m[5] = "new"
    assert list(m) == [3, 4, 5] and m.evicted == 2


def test_a_new_key_below_the_cap_is_stored_last_as_by_setitem() -> None:
    """What SDC relies on for a new group: below the cap, nothing is evicted either way, and the new key is last."""
    by_store: Bounded[int, str] = Bounded(3)
    by_setitem: Bounded[int, str] = Bounded(3)
    for m in (by_store, by_setitem):
        m[1] = "x"
    store_known(by_store, 2, "y")
    by_setitem[2] = "y"
    assert list(by_store.items()) == list(by_setitem.items()) == [(1, "x"), (2, "y")]
    assert by_store.evicted == by_setitem.evicted == 0
    by_store[3], by_store[4] = "z", "w"  # the cap still bites as before: 1, the oldest, goes
    assert list(by_store) == [2, 3, 4] and by_store.evicted == 1
