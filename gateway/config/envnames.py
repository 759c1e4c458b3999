"""``CUTOVER_*`` environment variables that set nothing (README "Configuration").

A setting from the environment is ``CUTOVER_<SECTION>__<KEY>``. A misspelt section
(``CUTOVER_GATWAY__LISTEN``) or one underscore where two go (``CUTOVER_GATEWAY_LISTEN``)
matched no setting and was ignored without a word: the file's value stayed in force.
An unknown key in a known section is already an error (``gateway.listn: is not a known
setting``); other ``CUTOVER_*`` names (``CUTOVER_CONFIG``, tools' own flags) are left alone.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping

__all__ = ["ignored_environment"]

PREFIX = "CUTOVER_"


def ignored_environment(
    sections: Iterable[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """One line per variable that looks like a setting and sets nothing; ``sections``
    are the configuration's top-level names (``gateway``, ``webhooks``, ...)."""
    known = sorted(section.upper() for section in sections)
    lines = []
    for name in sorted(os.environ if environ is None else environ):
        rest = name.upper().removeprefix(PREFIX)
        if rest == name.upper():
            continue
        section, nested, key = rest.partition("__")
        if nested and section not in known:
            close = difflib.get_close_matches(section, known, n=1)
            hint = f" (did you mean {PREFIX}{close[0]}__{key}?)" if close else ""
            lines.append(f"{name} names no section of the configuration and is ignored{hint}")
        elif not nested:
            single = next((s for s in known if rest.startswith(f"{s}_")), None)
            if single is not None:
                lines.append(f"{name} is ignored: a setting takes two underscores after its "
                             f"section, {PREFIX}{single}__{rest[len(single) + 1:]}")
    return lines
