"""Whether a SQLite database in WAL mode has changed, from its WAL-index header.

Every commit to a database in WAL mode, by any connection of any process, rewrites the
header of its WAL index, the ``<database>-shm`` file every connection maps (SQLite's "WAL
file format", sections "The WAL-Index Header" and "The WAL-Index File Format"): 48 bytes
written twice, which carry a counter raised by each transaction (``iChange``), the last
valid frame (``mxFrame``), the WAL's salts (new at each restart of the WAL) and the
checksum of its last frame. A reader that finds the two copies equal has read a whole
header; equal headers at two moments mean that nothing was committed in between.

:class:`WalStamp` reads those 96 bytes from a read-only mapping of the file, in well under
a microsecond, where a primary-key ``SELECT`` costs several (it takes the WAL's read lock
and releases it: docs/benchmarks.md). Its callers read a stamp *before* the read it
vouches for, so the stamp is never newer than what the read saw.

The mapping is only safe while a connection of this process keeps the database open in
WAL mode: SQLite deletes or truncates the file only when no other connection has it
open (the last one to close, or the first to open), so the owner maps it after its own
connection has read, and unmaps it before closing that connection
(:class:`gateway.store.reader.SqliteReads`).
"""

from __future__ import annotations

import mmap
import os

__all__ = ["HEADER_BYTES", "WalStamp"]

HEADER_BYTES = 48
"""One copy of the WAL-index header; the file starts with two."""
_IS_INIT = 12  # offset of isInit in a copy: 1 once the header has been written


class WalStamp:
    """The WAL-index header of the database file ``path`` as a change stamp.

    Parameters
    ----------
    path : str
        The database file (not ``:memory:``); its WAL index is ``path + "-shm"``.

    Raises
    ------
    OSError
        The WAL index cannot be opened or is shorter than its header (not WAL mode, or
        no connection has read the database yet).
    """

    def __init__(self, path: str) -> None:
        fd = os.open(f"{path}-shm", os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < 2 * HEADER_BYTES:
                raise OSError(f"{path}-shm holds no WAL-index header")
            self._map: mmap.mmap | None = mmap.mmap(
                fd, 2 * HEADER_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)  # the mapping keeps the file

    def read(self) -> bytes | None:
        """The header (48 bytes), or None while it is being written (its two copies
        differ) or not yet written: then nothing can be said about a change."""
        if self._map is None:
            return None
        both = self._map[:2 * HEADER_BYTES]
        first = both[:HEADER_BYTES]
        if first != both[HEADER_BYTES:] or first[_IS_INIT] != 1:
            return None
        return first

    def close(self) -> None:
        """Unmap the file; :meth:`read` answers None from then on."""
        if self._map is not None:
            self._map.close()
            self._map = None
