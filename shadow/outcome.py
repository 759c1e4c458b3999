"""What the comparison reads of one terminal prediction (docs/shadow.md, "Inputs").

An :class:`Outcome` is one arm of a pair: the control's or the candidate's terminal job,
reduced to what the measures need. The gateway builds it from its job row and the output
files it copied into owned storage; tests build it by hand. Nothing here does I/O except
:func:`read_path`, the default way to get a file's bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from contracts.job import TERMINAL_STATES, Job, JobState

__all__ = ["Outcome", "OutputFile", "Reader", "read_path"]

# Built when the first pair is compared, not at every start of the gateway, which
# imports this module whether or not any route shadows (docs/benchmarks.md, "Start-up:
# the last 10 %").
_CONFIG = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class OutputFile(BaseModel):
    """One output file as stored by the gateway.

    Attributes
    ----------
    content_type : str
        The MIME type recorded when the file was copied (``image/png``), parameters
        allowed (``text/plain; charset=utf-8``); compared without parameters, lower-cased.
    size_bytes : int
        The stored size, in bytes.
    sha256 : str
        Hex digest of the stored bytes (64 hex characters).
    url : str or None
        The URL the app sees in the prediction's ``output``; strings of the output equal to
        it are read as "this file", not as text. Reports may link or show it.
    path : Path or None
        A local file holding the bytes, read by :func:`read_path` when no reader is given;
        left out of a dump whose context has ``public`` (the JSON report: no server
        file-system path), kept in the stored comparison (previews read it).
    key : str or None
        The storage key, for a caller-supplied :data:`Reader`.
    """

    model_config = _CONFIG

    content_type: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    url: str | None = None
    path: Path | None = None
    key: str | None = None

    @model_serializer(mode="wrap")
    def _public(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        dumped = handler(self)
        if isinstance(dumped, dict) and (info.context or {}).get("public"):
            dumped.pop("path", None)
        return dumped

    @property
    def media_type(self) -> str:
        """``content_type`` without parameters, lower-cased (``image/png``)."""
        return self.content_type.split(";", 1)[0].strip().lower()


class Outcome(BaseModel):
    """One terminal prediction, the input of :func:`shadow.compare.compare`.

    Attributes
    ----------
    status : JobState
        ``completed``, ``failed`` or ``canceled``; an active state is rejected.
    error : str or None
        The error text of a failed prediction.
    output : Any
        The prediction's JSON ``output`` (file URLs in it match ``files[i].url``).
    files : tuple of OutputFile
        The output files, in any order: they are paired with the other arm's by where
        their ``url`` first appears in ``output`` (see :func:`shadow.compare.compare`).
    created_at, started_at, completed_at : datetime or None
        Timezone-aware; queue time is ``started - created``, run time ``completed -
        started``, both in seconds.
    cost_usd : float or None
        What the provider reported the prediction cost, in US dollars, if it did.
    """

    model_config = _CONFIG

    status: JobState
    error: str | None = None
    output: Any = None
    files: tuple[OutputFile, ...] = ()
    created_at: AwareDatetime | None = None
    started_at: AwareDatetime | None = None
    completed_at: AwareDatetime | None = None
    cost_usd: float | None = Field(default=None, ge=0)

    @field_validator("status")
    @classmethod
    def _terminal(cls, status: JobState) -> JobState:
        if status not in TERMINAL_STATES:
            raise ValueError(f"an outcome is a terminal prediction, not {status.value!r}")
        return status

    @property
    def queue_s(self) -> float | None:
        """Seconds from creation to start, or None when a time is missing."""
        return _seconds(self.created_at, self.started_at)

    @property
    def run_s(self) -> float | None:
        """Seconds from start to completion, or None when a time is missing."""
        return _seconds(self.started_at, self.completed_at)

    @classmethod
    def from_job(
        cls, job: Job, files: tuple[OutputFile, ...] = (), *, cost_usd: float | None = None
    ) -> Outcome:
        """The outcome of a terminal :class:`contracts.job.Job` and its stored files.

        Raises
        ------
        pydantic.ValidationError
            The job is not terminal.
        """
        return cls(
            status=job.state,
            error=job.error,
            output=job.output,
            files=files,
            created_at=job.created_at,
            started_at=job.started_at,
            completed_at=job.completed_at,
            cost_usd=cost_usd,
        )


Reader = Callable[[OutputFile], Awaitable[bytes]]
"""Returns the bytes of one stored output file (e.g. from the gateway's storage)."""


async def read_path(file: OutputFile) -> bytes:
    """Read ``file.path`` in a worker thread.

    Raises
    ------
    FileNotFoundError
        The file has no ``path`` or the path does not exist.
    """
    if file.path is None:
        raise FileNotFoundError(f"output file {file.sha256[:12]} has no local path")
    return await asyncio.to_thread(file.path.read_bytes)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())
