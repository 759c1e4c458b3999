"""How gateway/files/download.py hands a block to the file: writes of at most WRITE_BYTES, and
a short write resumed where it stopped (an unbuffered file may write less than asked)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from gateway.files.download import WRITE_BYTES, _write


class ShortWrites(io.RawIOBase):
    """A file that takes at most the next of ``limits`` bytes a call, recording each ask."""

    def __init__(self, limits: list[int]) -> None:
        self.data = bytearray()
        self.asked: list[int] = []
        self._limits = limits

    def writable(self) -> bool:
        return True

    def write(self, chunk) -> int:  # type: ignore[no-untyped-def, override]
        self.asked.append(len(chunk))
        n = min(len(chunk), self._limits.pop(0) if self._limits else len(chunk))
        self.data += bytes(chunk[:n])
        return n


@given(
    size=st.integers(0, 3 * WRITE_BYTES + 7),
    limits=st.lists(st.integers(1, 2 * WRITE_BYTES), max_size=8),
)
def test_a_block_lands_whole_in_writes_of_at_most_write_bytes(size: int, limits: list[int]):
    block = bytes(range(256)) * (size // 256) + bytes(size % 256)
    handle = ShortWrites(limits)
    _write(handle, block)
    assert bytes(handle.data) == block
    assert all(0 < asked <= WRITE_BYTES for asked in handle.asked)
