"""Import each named module alone, with warnings as errors, in one interpreter.

Run as ``python -W error tests/support/import_alone.py NAME...`` from the repository root;
prints one JSON object, ``{name: error}``, where ``error`` is ``""`` for a module that
imported cleanly and the end of its traceback otherwise (tests/unit/test_imports.py).

Each module is imported in a forked child of this process, which holds none of the named
packages' modules, so each import is a fresh one: an import-time cycle, an import-time I/O
failure or a warning raised while the module runs fails that module alone. What children
share is the third-party modules that the named modules pull in, learnt in a throwaway
child and imported here first, with warnings as errors too: a warning a library raises
when imported is still reported (under ``"<third-party>"``). ``CUTOVER_IMPORT_JOBS``
children run at once (default: one per core).

Besides module names, two checks run in children of their own (a name with a colon):
``all:PACKAGE`` (each name in the package's ``__all__`` resolves) and
``lazy:shadow`` (importing ``shadow`` loads none of its submodules until one is used).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

TAIL = 2000  # characters of a traceback kept
PROJECT: set[str] = set()  # the top-level packages of the names to check


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in PROJECT


def _check(name: str) -> None:
    kind, _, target = name.partition(":")
    if not target:
        importlib.import_module(name)
    elif kind == "all":
        package = importlib.import_module(target)
        missing = [n for n in getattr(package, "__all__", []) if not hasattr(package, n)]
        assert not missing, f"__all__ names missing from {target}: {missing}"
    elif kind == "lazy":
        package = importlib.import_module(target)
        loaded = sorted(m for m in sys.modules if m.startswith(f"{target}."))
        assert loaded == [], f"importing {target} loaded {loaded}"
        assert package.compare is sys.modules[f"{target}.compare"]
    else:
        raise ValueError(f"unknown check {name!r}")


def _spawn(work: object, *args: str) -> tuple[int, int]:
    """Fork a child that runs ``work(*args)``; its pid and the pipe its report comes on."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        code = 0
        try:
            result = work(*args)  # type: ignore[operator]
            message = "" if result is None else str(result)
        except BaseException:  # any failure is the module's, reported
            message, code = traceback.format_exc()[-TAIL:] or "failed", 1
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(message.encode(errors="replace"))
        os._exit(code)
    os.close(write_end)
    return pid, read_end


def _outcome(out: str, status: int) -> str:
    if os.waitstatus_to_exitcode(status) != 0 and not out:
        return f"the import ended the process (wait status {status})"
    return out


def _report(read_end: int, status: int) -> str:
    """A finished child's report (``""``: it passed)."""
    with os.fdopen(read_end, "rb") as pipe:
        return _outcome(pipe.read().decode(errors="replace"), status)


def _in_child(work: object, *args: str) -> str:
    """Run ``work(*args)`` in a forked child and return what it printed (read before the
    wait: it may be longer than a pipe's buffer); raises RuntimeError if the work raised."""
    pid, read_end = _spawn(work, *args)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read().decode(errors="replace")
    status = os.waitpid(pid, 0)[1]
    if os.waitstatus_to_exitcode(status) != 0:  # the work itself is broken: say so, loudly
        raise RuntimeError(f"{getattr(work, '__name__', work)} failed in its child:\n{out}")
    return out


def _each_in_a_child(names: list[str], at_once: int) -> dict[str, str]:
    """:func:`_check` of each name in a child of its own, ``at_once`` children at a time
    (a report is a traceback's tail, well within a pipe's buffer, so a child never waits)."""
    results: dict[str, str] = {}
    running: dict[int, tuple[str, int]] = {}
    waiting = list(reversed(names))
    while waiting or running:
        while waiting and len(running) < at_once:
            name = waiting.pop()
            pid, read_end = _spawn(_check, name)
            running[pid] = (name, read_end)
        pid, status = os.wait()
        name, read_end = running.pop(pid)
        results[name] = _report(read_end, status)
    return results


def _third_party(*names: str) -> str:
    """Every module outside the project that importing ``names`` loads, in import order."""
    for name in names:
        try:
            _check(name)
        except BaseException:  # the module's own child reports it
            pass
    return "\n".join(m for m in sys.modules if not _ours(m))


def main(names: list[str]) -> dict[str, str]:
    sys.path[0] = os.getcwd()  # as ``python -c``: the project, not tests/support/
    PROJECT.update(name.rpartition(":")[2].split(".", 1)[0] for name in names)
    results: dict[str, str] = {}
    loaded = _in_child(_third_party, *names)
    for module in loaded.splitlines():
        if module in sys.modules:
            continue
        try:
            importlib.import_module(module)
        except Warning:
            results["<third-party>"] = f"{module}:\n{traceback.format_exc()[-TAIL:]}"
        except BaseException:  # not importable by itself: a child imports it
            pass
    leaked = sorted(m for m in sys.modules if _ours(m))
    assert not leaked, f"a third-party import loaded project modules: {leaked}"
    at_once = int(os.environ.get("CUTOVER_IMPORT_JOBS", "0")) or os.cpu_count() or 1
    results.update(_each_in_a_child(names, at_once))
    return {name: results[name] for name in sorted(results)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
