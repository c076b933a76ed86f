"""A set of 64-bit hash values in 4 bytes each: "maybe seen" or "certainly not seen".

The dataset check refuses duplicate ids before a run starts, and must not hold every id of
a million-row file to do it. :class:`SeenHashes` answers whether a hash was added before,
with no false negatives and rare false positives; a caller confirms the positives exactly
in a second pass. It is an open-addressing table of 32-bit fingerprints (the high half of
each hash) whose home slot comes from the low half, so two hashes are confused only when
both halves collide (about once in 10^9 additions at a million values), sized from the
number of values expected so it never has to be rebuilt; when more arrive than expected,
a table twice the size takes them.
"""

from __future__ import annotations

from array import array

MAX_LOAD = 0.7
"""Fill a table no further than this: linear probing stays short."""
MIN_CAPACITY = 1024


class _Table:
    __slots__ = ("capacity", "count", "limit", "slots")

    def __init__(self, expected: int) -> None:
        self.capacity = max(MIN_CAPACITY, int(expected / MAX_LOAD) + 1)
        self.limit = int(self.capacity * MAX_LOAD)
        self.slots = array("I", bytes(4 * self.capacity))
        self.count = 0

    def find(self, home: int, fingerprint: int) -> int:
        """The slot holding ``fingerprint`` (from its home slot on), or ``-1 - empty slot``."""
        slots, capacity = self.slots, self.capacity
        index = home % capacity
        while (current := slots[index]) != 0:
            if current == fingerprint:
                return index
            index = index + 1 if index + 1 < capacity else 0
        return -1 - index


class SeenHashes:
    """The hashes added so far, approximately (see the module docstring).

    ``expected`` is how many values will be added (an upper bound is fine; fewer cost
    memory, more a second table). Memory: 4 / ``MAX_LOAD`` bytes per expected value.
    """

    def __init__(self, expected: int = MIN_CAPACITY) -> None:
        self._tables = [_Table(expected)]

    @staticmethod
    def _split(value: int) -> tuple[int, int]:
        value &= 0xFFFF_FFFF_FFFF_FFFF
        return value & 0xFFFF_FFFF, (value >> 32) or 1  # 0 marks an empty slot

    def add(self, value: int) -> bool:
        """Add ``value`` (an int; its low 64 bits count); return whether it may have been
        added before. ``False`` is certain; ``True`` is almost always right."""
        home, fingerprint = self._split(value)
        for table in self._tables:
            if table.find(home, fingerprint) >= 0:
                return True
        table = self._tables[-1]
        if table.count >= table.limit:
            table = _Table(2 * table.capacity)
            self._tables.append(table)
        table.slots[-1 - table.find(home, fingerprint)] = fingerprint
        table.count += 1
        return False

    def __contains__(self, value: int) -> bool:
        home, fingerprint = self._split(value)
        return any(table.find(home, fingerprint) >= 0 for table in self._tables)

    @property
    def nbytes(self) -> int:
        return sum(4 * table.capacity for table in self._tables)
