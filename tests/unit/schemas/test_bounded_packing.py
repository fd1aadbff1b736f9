"""A `Bounded` map with a packing pickles its values as one block and comes back the same map (issue 23)."""

from __future__ import annotations

import pickle
from typing import Any

from trainguard.schemas.bounded import Bounded


class Pairs:
    """Packs values that are all two-item lists as tuples; refuses anything else."""

    def pack(self, values: list[Any]) -> list[tuple[Any, ...]] | None:
        if any(not isinstance(v, list) or len(v) != 2 for v in values):
            return None
        return [tuple(v) for v in values]

    def unpack(self, packed: list[tuple[Any, ...]]) -> list[list[Any]]:
        return [list(v) for v in packed]


def _filled(packing: Pairs | None) -> Bounded[str, Any]:
    m: Bounded[str, Any] = Bounded(3, packing)
    for key in "abcde":
        m[key] = [key, ord(key)]
    m["d"] = ["d", 0]  # a known key keeps its place
    return m


def test_a_packed_map_comes_back_with_its_keys_in_order_its_cap_count_and_packing() -> None:
    m = _filled(Pairs())
    blob = pickle.dumps(m)
    assert b"_unpacked" in blob  # it went as one block
    back = pickle.loads(blob)
    assert list(back.items()) == list(m.items()) == [("c", ["c", 99]), ("d", ["d", 0]), ("e", ["e", 101])]
    assert (back.cap, back.evicted, type(back.packing)) == (3, 2, Pairs)
    back["f"] = ["f", 1]
    assert list(back) == ["d", "e", "f"] and back.evicted == 3  # still bounded, oldest first


def test_values_the_packing_refuses_go_item_by_item_and_the_packing_stays() -> None:
    m = _filled(Pairs())
    m["e"] = "not a pair"
    back = pickle.loads(pickle.dumps(m))
    assert list(back.items()) == list(m.items()) and back.evicted == 2 and isinstance(back.packing, Pairs)
    empty = pickle.loads(pickle.dumps(Bounded(5, Pairs())))
    assert len(empty) == 0 and isinstance(empty.packing, Pairs) and empty.cap == 5


# `Bounded(3)` holding c, d, e after two evictions, pickled by the code before packings (f171c2e).
BEFORE = (b"\x80\x05\x95f\x00\x00\x00\x00\x00\x00\x00\x8c\x1atrainguard.schemas.bounded\x94\x8c\x07Bounded\x94"
          b"\x93\x94K\x03\x85\x94R\x94(\x8c\x01c\x94]\x94(h\x05Kce\x8c\x01d\x94]\x94(h\x07Kde\x8c\x01e\x94]\x94(h\tKee"
          b"u}\x94\x8c\x07evicted\x94K\x02sb.")


def test_a_map_without_a_packing_pickles_as_before_and_one_from_before_restores() -> None:
    plain = _filled(None)
    blob = pickle.dumps(plain)
    assert b"_unpacked" not in blob
    back = pickle.loads(blob)
    assert list(back.items()) == list(plain.items()) and back.packing is None and back.evicted == 2
    old = pickle.loads(BEFORE)
    assert list(old.items()) == [("c", ["c", 99]), ("d", ["d", 100]), ("e", ["e", 101])]
    assert (old.cap, old.evicted, old.packing) == (3, 2, None)
