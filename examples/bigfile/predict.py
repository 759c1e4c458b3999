"""Bigfile: a Cog model whose output is one large file, to measure how outputs travel.

The file is ``mib`` MiB: one 1 MiB block of pseudo-random bytes (``random.Random(seed)``)
repeated, so a test can compute its SHA-256 without reading it. Run the server with
``--upload-url`` pointing at the gateway (docs/cog.md §1.10) and the file is PUT there;
without it, it comes back inline as a base64 ``data:`` URI.
"""

import random
import tempfile

from cog import BasePredictor, Input, Path


def block(seed: int) -> bytes:
    """The 1 MiB block the file repeats."""
    return random.Random(seed).randbytes(1 << 20)


class Predictor(BasePredictor):
    def predict(
        self,
        mib: int = Input(default=1, ge=0, le=4096, description="Size of the file in MiB"),
        seed: int = Input(default=0, description="Seed of the file's bytes"),
    ) -> Path:
        data = block(seed)
        path = Path(tempfile.mkdtemp(prefix="bigfile-")) / "big.bin"
        with open(path, "wb") as handle:
            for _ in range(mib):
                handle.write(data)
        return path
