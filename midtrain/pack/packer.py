"""Best-fit-decreasing bin packing and the splitting of over-long documents at natural boundaries.

Pure functions over lengths, so they are easy to test and to benchmark on realistic distributions.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from midtrain.formats.shards import padded_length


def best_fit_decreasing(
    lengths: list[int] | np.ndarray, capacity: int, order_key: np.ndarray | None = None, pad_multiple: int = 1
) -> list[list[int]]:
    """Pack items (by index) into bins of ``capacity``: each item, longest first, goes into the open bin whose
    free space it fills most tightly. Items are padded to ``pad_multiple`` when placed.

    ``order_key`` breaks ties between equal lengths (a seeded hash makes the result deterministic per seed
    yet independent of input order). Open bins live in one sorted list keyed by (free space, bin id), so a
    placement costs a binary search plus a list move, in C: millions of pieces per task are fine.
    """
    sizes = np.asarray([padded_length(int(n), pad_multiple) for n in lengths], dtype=np.int64)
    if len(sizes) and (sizes.max() > capacity or sizes.min() <= 0):
        bad = int(np.argmax(sizes > capacity)) if sizes.max() > capacity else int(np.argmin(sizes))
        raise ValueError(f"item {bad} has padded length {sizes[bad]}, outside (0, {capacity}]")
    keys = order_key if order_key is not None else np.arange(len(sizes))
    order = np.lexsort((keys, -sizes))  # longest first, then by key
    bins: list[list[int]] = []
    free_keys: list[int] = []  # (free << 32) | bin id, sorted; only bins with free space
    shift = 32
    for i in order.tolist():
        size = int(sizes[i])
        pos = bisect_left(free_keys, size << shift)
        if pos < len(free_keys):
            key = free_keys.pop(pos)
            b, free = key & 0xFFFFFFFF, key >> shift
            bins[b].append(i)
            free -= size
        else:
            b, free = len(bins), capacity - size
            bins.append([i])
        if free > 0:
            insort(free_keys, (free << shift) | b)
    return bins


def split_points(
    length: int, capacity: int, preferred: list[int], fallback: np.ndarray | None = None, pad_multiple: int = 1
) -> list[int]:
    """Cut offsets (exclusive ends) splitting a ``length``-token document into pieces that fit ``capacity``.

    Each piece ends at the last ``preferred`` boundary (a file start in a packed repository) that fits and
    leaves the piece at least a quarter of a bin (no slivers), else at the last ``fallback`` boundary (a
    token ending a line), else exactly at the capacity. Only documents longer than a bin are split; the
    result always ends with ``length``.
    """
    limit = capacity - (capacity % pad_multiple)  # the largest piece that still fits once padded
    pref = np.asarray(sorted({p for p in preferred if 0 < p < length}), dtype=np.int64)
    fb = np.asarray(fallback if fallback is not None else [], dtype=np.int64)
    cuts, start = [], 0
    while length - start > limit:
        end = start + limit
        cut = _last_in(pref, start + limit // 4, end)
        if cut is None:
            cut = _last_in(fb, start, end)
        if cut is None:
            cut = end
        cuts.append(cut)
        start = cut
    cuts.append(length)
    return cuts


def _last_in(points: np.ndarray, start: int, end: int) -> int | None:
    """The largest point p with start < p <= end, or None."""
    k = int(np.searchsorted(points, end, side="right")) - 1
    if k >= 0 and points[k] > start:
        return int(points[k])
    return None
