"""Compare one pair of terminal predictions (docs/shadow.md, "The comparison of a pair").

:func:`compare` turns two :class:`~shadow.outcome.Outcome` values (the control and the
candidate, or the control and a second control run) into a :class:`PairComparison`:

- **contract breaks**, absolute and never excused by noise: a different status, a JSON
  type or object key that differs, a different number of files, a different content type,
  a file that claims to be an image and does not decode;
- **measures** of quality drift, each a float where 0 means "the same" (named in
  :data:`MEASURES`), to be judged against the control-vs-control spread by
  :mod:`shadow.noise`;
- the facts of each arm (status, error class, queue and run seconds, cost, an output
  excerpt and the files) that reports show side by side.

The result is a frozen pydantic model, JSON-serialisable, for the gateway to store.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from contracts.job import JobState
from shadow import media, structure
from shadow.heatmap import HeatMap, heat_map
from shadow.measures import MEASURES
from shadow.outcome import Outcome, OutputFile, Reader, read_path
from shadow.text_measures import text_measures

__all__ = [
    "MEASURES",
    "ArmFacts",
    "ContractBreak",
    "PairComparison",
    "add_previews",
    "compare",
    "error_class",
]


BreakKind = Literal["status", "type", "key", "file_count", "content_type", "undecodable"]

EXCERPT_CHARS = 2_000
"""Output JSON kept per arm for display."""
TEXT_CHARS = 4_000
"""Output text kept per arm for the side-by-side diff."""
MAX_STRUCTURE_BREAKS = 20
"""Type and key breaks listed per pair; the rest are counted in a note."""

_TEXT_TYPES = ("application/json", "application/x-ndjson")
_ERROR_KEYWORDS = (
    ("timeout", re.compile(r"time[d]?[ -]?out|deadline", re.IGNORECASE)),
    ("out_of_memory", re.compile(r"out of memory|\boom\b|memoryerror", re.IGNORECASE)),
    ("safety", re.compile(r"nsfw|safety|content polic", re.IGNORECASE)),
    ("canceled", re.compile(r"cancel", re.IGNORECASE)),
)
_EXCEPTION_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception))\b")


class ContractBreak(BaseModel):
    """A difference that breaks what an app relies on (``path`` is a JSONPath or file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: BreakKind
    path: str
    control: str
    candidate: str


class ArmFacts(BaseModel):
    """What one arm did, for aggregation and display.

    ``queue_s`` / ``run_s`` in seconds, ``cost_usd`` in US dollars (None: not known);
    ``output_excerpt`` is the output as JSON, at most :data:`EXCERPT_CHARS` characters;
    ``text`` the output's text (:func:`shadow.structure.text_of` plus text files), at most
    :data:`TEXT_CHARS`; ``previews`` holds one image ``data:`` URI or None per file once
    :func:`add_previews` ran.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: JobState
    error: str | None = None
    error_class: str = "none"
    queue_s: float | None = None
    run_s: float | None = None
    cost_usd: float | None = None
    output_excerpt: str = ""
    text: str = ""
    files: tuple[OutputFile, ...] = ()
    previews: tuple[str | None, ...] = ()


class PairComparison(BaseModel):
    """The comparison of one pair; ``measures`` maps names of :data:`MEASURES` to values.

    A measure is absent when it does not apply (no images, a failed arm). ``notes`` says
    what could not be measured (a file that could not be read) and why.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair_id: str | None = None
    control: ArmFacts
    candidate: ArmFacts
    breaks: tuple[ContractBreak, ...] = ()
    measures: dict[str, float] = {}
    notes: tuple[str, ...] = ()
    heatmaps: tuple[HeatMap | None, ...] = ()
    input_excerpt: str = ""  # the input, as :func:`shadow.inputs.input_excerpt` shows it

    @property
    def is_contract_break(self) -> bool:
        """Whether any contract break was found."""
        return bool(self.breaks)


def error_class(error: str | None) -> str:
    """A coarse class of an error text, stable across providers' wordings.

    ``none`` for no error, then the first keyword class that matches (``timeout``,
    ``out_of_memory``, ``safety``, ``canceled``), else the first ``SomethingError`` /
    ``SomethingException`` name in the text, else ``other``.
    """
    if not error:
        return "none"
    for name, pattern in _ERROR_KEYWORDS:
        if pattern.search(error):
            return name
    match = _EXCEPTION_NAME.search(error)
    return match.group(1) if match else "other"


async def compare(
    control: Outcome,
    candidate: Outcome,
    *,
    read: Reader = read_path,
    previews: bool = False,
    pair_id: str | None = None,
) -> PairComparison:
    """Compare two terminal predictions made from one input.

    Parameters
    ----------
    control, candidate : Outcome
        The two arms (for a baseline pair, two runs of the control).
    read : Reader
        Gets a file's bytes; called only for image and text files whose sha256 differ
        (and for every image when ``previews``). Defaults to reading ``file.path``.
    previews : bool
        Also attach image thumbnails (``data:`` URIs, 256 px) to the arms' facts.
    pair_id : str or None
        Carried through to the result (e.g. the shadow job's id).

    Returns
    -------
    PairComparison
        Never raises for what the outputs contain; a file ``read`` cannot get (an
        ``OSError``) becomes a note and its measures are left out.

    Raises
    ------
    Exception
        Whatever ``read`` raises that is not an ``OSError`` (a storage reader should
        raise ``FileNotFoundError`` or another ``OSError`` for a missing file).
    """
    work = _Pair(control, candidate, read)
    await work.run()
    control_facts, candidate_facts = await asyncio.to_thread(
        lambda: (_facts(control, work.texts[0]), _facts(candidate, work.texts[1]))
    )
    result = PairComparison(
        pair_id=pair_id,
        control=control_facts,
        candidate=candidate_facts,
        breaks=tuple(work.breaks),
        measures=work.measures,
        notes=tuple(work.notes),
    )
    return await add_previews(result, read) if previews else result


async def add_previews(pair: PairComparison, read: Reader = read_path) -> PairComparison:
    """The pair with an image thumbnail (PNG ``data:`` URI, <= 256 px) per image file,
    and a difference :class:`~shadow.heatmap.HeatMap` per position where both arms have
    an image (``heatmaps``, by file position).

    Files that are not images, or cannot be read or decoded, get None.
    """

    async def arm(facts: ArmFacts) -> ArmFacts:
        shown = [await _preview(file, read) for file in facts.files]
        return facts.model_copy(update={"previews": tuple(shown)})

    maps = [await _heat_map(a, b, read)
            for a, b in zip(pair.control.files, pair.candidate.files, strict=False)]
    return pair.model_copy(update={
        "control": await arm(pair.control), "candidate": await arm(pair.candidate),
        "heatmaps": tuple(maps),
    })


async def _heat_map(file_a: OutputFile, file_b: OutputFile, read: Reader) -> HeatMap | None:
    if _content_kind(file_a) != "image" or _content_kind(file_b) != "image":
        return None
    try:
        return await asyncio.to_thread(heat_map, await read(file_a), await read(file_b))
    except (OSError, media.ImageError):
        return None


async def _preview(file: OutputFile, read: Reader) -> str | None:
    if not file.media_type.startswith("image/"):
        return None
    try:
        return await asyncio.to_thread(media.preview_data_uri, await read(file))
    except (OSError, media.ImageError):
        return None


class _Pair:
    """The mutable work of one :func:`compare` call."""

    def __init__(self, control: Outcome, candidate: Outcome, read: Reader) -> None:
        self.a, self.b, self.read = control, candidate, read
        self.breaks: list[ContractBreak] = []
        self.measures: dict[str, float] = {}
        self.notes: list[str] = []
        self.texts = ["", ""]

    async def run(self) -> None:
        if self.a.status != self.b.status:
            self._break("status", "$", self.a.status.value, self.b.status.value)
            return
        if self.a.status == JobState.FAILED:
            same = error_class(self.a.error) == error_class(self.b.error)
            self.measures["error_class"] = 0.0 if same else 1.0
        if self.a.status != JobState.COMPLETED:
            return
        # CPU-bound walks run in a worker thread: a large output must not stall the loop
        await asyncio.to_thread(self._structure)
        await self._files()
        await asyncio.to_thread(self._text)

    def _break(self, kind: BreakKind, path: str, control: str, candidate: str) -> None:
        self.breaks.append(
            ContractBreak(kind=kind, path=path, control=control, candidate=candidate)
        )

    def _structure(self) -> None:
        result = structure.compare_structure(
            self.a.output, self.b.output,
            control_files=_urls(self.a), candidate_files=_urls(self.b),
        )
        found = result.contract_differences
        for difference in found[:MAX_STRUCTURE_BREAKS]:
            kind: BreakKind = "type" if difference.kind == "type" else "key"
            self._break(kind, difference.path, difference.control, difference.candidate)
        if len(found) > MAX_STRUCTURE_BREAKS:
            self.notes.append(f"{len(found) - MAX_STRUCTURE_BREAKS} more type or key "
                              "differences not listed")
        self.measures["list_length"] = float(len(result.length_differences))
        if result.number_delta is not None:
            self.measures["number"] = result.number_delta

    async def _files(self) -> None:
        files_a, files_b = _in_output_order(self.a), _in_output_order(self.b)
        if len(files_a) != len(files_b):
            self._break("file_count", "files", str(len(files_a)), str(len(files_b)))
        pairs = list(zip(files_a, files_b, strict=False))
        if not pairs:
            return
        sizes, differing = [], 0
        for index, (file_a, file_b) in enumerate(pairs):
            if file_a.media_type != file_b.media_type:
                self._break("content_type", f"files[{index}]", file_a.media_type,
                            file_b.media_type)
            sizes.append(_relative(file_a.size_bytes, file_b.size_bytes))
            differing += file_a.sha256.lower() != file_b.sha256.lower()
            await self._contents(index, file_a, file_b)
        self.measures["file_size"] = max(sizes)
        self.measures["file_bytes"] = differing / len(pairs)

    async def _contents(self, index: int, file_a: OutputFile, file_b: OutputFile) -> None:
        kind_a, kind_b = _content_kind(file_a), _content_kind(file_b)
        if kind_a != kind_b or kind_a is None:
            return
        same = file_a.sha256.lower() == file_b.sha256.lower()
        if kind_a == "image":
            await self._images(index, file_a, file_b, same)
        elif not same:
            data = await self._read_both(index, file_a, file_b)
            if data is not None:
                self.texts[0] += "\n" + media.decode_text(data[0])
                self.texts[1] += "\n" + media.decode_text(data[1])

    async def _images(self, index: int, file_a: OutputFile, file_b: OutputFile,
                      same: bool) -> None:
        if same:
            found = media.ImageComparison(
                control_size=(0, 0), candidate_size=(0, 0),
                size_delta=0.0, phash_bits=0, color_levels=0.0,
            )
        else:
            data = await self._read_both(index, file_a, file_b)
            if data is None:
                return
            try:
                found = await asyncio.to_thread(media.compare_images, *data)
            except media.ImageError as exc:
                self._break("undecodable", f"files[{index}]", "image", str(exc)[:200])
                return
        self._max("image_size", found.size_delta)
        self._max("image_phash", float(found.phash_bits))
        self._max("image_color", found.color_levels)

    async def _read_both(
        self, index: int, file_a: OutputFile, file_b: OutputFile
    ) -> tuple[bytes, bytes] | None:
        try:
            return await self.read(file_a), await self.read(file_b)
        except OSError as exc:
            self.notes.append(f"files[{index}] not measured: {type(exc).__name__}: {exc}")
            return None

    def _text(self) -> None:
        output_a = structure.text_of(self.a.output, _urls(self.a))
        output_b = structure.text_of(self.b.output, _urls(self.b))
        text_a, text_b = output_a + self.texts[0], output_b + self.texts[1]
        self.texts = [text_a.strip("\n"), text_b.strip("\n")]
        if self.texts[0] or self.texts[1]:
            self.measures["text"] = media.text_distance(*self.texts)
            self.measures.update(text_measures(*self.texts))

    def _max(self, name: str, value: float) -> None:
        self.measures[name] = max(value, self.measures.get(name, 0.0))


def _facts(outcome: Outcome, text: str) -> ArmFacts:
    return ArmFacts(
        status=outcome.status,
        error=outcome.error,
        error_class=error_class(outcome.error),
        queue_s=outcome.queue_s,
        run_s=outcome.run_s,
        cost_usd=outcome.cost_usd,
        output_excerpt=_excerpt(outcome.output),
        text=text[:TEXT_CHARS],
        files=_in_output_order(outcome),
    )


def _excerpt(output: Any) -> str:
    try:
        text = json.dumps(output, ensure_ascii=False, indent=1, default=str)
    except ValueError:  # a circular structure cannot come from JSON; be safe anyway
        text = repr(output)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def _in_output_order(outcome: Outcome) -> tuple[OutputFile, ...]:
    """Files ordered by where their URL first appears in the output (walk order); files
    whose URL does not appear keep their given order, after the others."""
    position: dict[str, int] = {}
    for index, text in enumerate(structure.strings_in_order(outcome.output)):
        position.setdefault(text, index)
    unseen = len(position)
    return tuple(sorted(outcome.files, key=lambda f: position.get(f.url or "", unseen)))


def _urls(outcome: Outcome) -> frozenset[str]:
    return frozenset(file.url for file in outcome.files if file.url)


def _content_kind(file: OutputFile) -> str | None:
    media_type = file.media_type
    if media_type.startswith("image/") and media_type != "image/svg+xml":
        return "image"
    if media_type.startswith("text/") or media_type in _TEXT_TYPES:
        return "text"
    return None


def _relative(a: int, b: int) -> float:
    scale = max(a, b)
    return 0.0 if scale == 0 else abs(a - b) / scale
