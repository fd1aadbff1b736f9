"""A `Bounded` map past its cap drops its oldest keys, a slice at a time, and nothing stores around the cap."""

from __future__ import annotations

import pickle

from trainguard.schemas.bounded import Bounded


def test_a_small_map_drops_exactly_its_oldest_key() -> None:
    m: Bounded[int, int] = Bounded(100)
    for k in range(150):
        m[k] = k
    assert list(m) == list(range(50, 150)) and m.evicted == 50


def test_a_large_map_drops_its_oldest_sixty_fourth_at_once_and_counts_each() -> None:
    m: Bounded[int, int] = Bounded(6400)
    for k in range(6401):
        m[k] = k
    assert list(m) == list(range(100, 6401)) and m.evicted == 100
    m[0] = 0  # a known key would keep its place; this one is new again, and last
    assert len(m) == 6302 and next(reversed(m)) == 0


def test_a_stream_of_new_keys_keeps_the_map_within_its_cap_and_the_newest_keys_in_it() -> None:
    """Hostile input: a burst of new jobs, ten times the cap. Each drop scans from the front once, not per key."""
    m: Bounded[str, int] = Bounded(10_000)
    for k in range(100_000):
        m[f"job-{k}"] = k
        assert len(m) <= 10_000
    assert "job-99999" in m and "job-0" not in m
    assert m.evicted == 100_000 - len(m)


def test_setdefault_and_update_go_through_the_cap() -> None:
    m: Bounded[int, int] = Bounded(2)
    m.update({1: 1, 2: 2, 3: 3})
    assert list(m) == [2, 3] and m.evicted == 1
    assert m.setdefault(4, 4) == 4 and m.setdefault(4, 0) == 4
    assert list(m) == [3, 4] and m.evicted == 2


def test_a_pickled_map_restores_with_its_cap_order_and_count() -> None:
    """The same reduce as when the map was an OrderedDict: snapshots from before restore alike."""
    m: Bounded[int, int] = Bounded(3)
    for k in range(5):
        m[k] = k
    back = pickle.loads(pickle.dumps(m))
    assert type(back) is Bounded and list(back.items()) == [(2, 2), (3, 3), (4, 4)]
    assert (back.cap, back.evicted) == (3, 2)
    back[5] = 5
    assert list(back) == [3, 4, 5]
