"""Importing the gateway (what ``cutover serve`` does first) leaves out SQLAlchemy's ORM and
its asyncio extension: the store drives Core through gateway/store/engine/aio.py, and the
extension's package imports the whole ORM (about a tenth of the start-up's instructions,
docs/benchmarks.md "Start-up")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_gateway_imports_neither_the_orm_nor_the_asyncio_extension() -> None:
    probe = ("import sys, gateway.cli, gateway.app; print(sorted(m for m in sys.modules "
             "if m.startswith(('sqlalchemy.orm', 'sqlalchemy.ext'))))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[]"
