"""``cutover health``'s own arguments: a bad one is a clear one-line error and exit status 1,
never 2 (Docker reserves it: gateway/healthcheck.py) nor a traceback."""

from __future__ import annotations

import pytest

from gateway import healthcheck


@pytest.mark.parametrize("argv", [
    ["--timeout", "-1"], ["--timeout", "0"], ["--timeout", "nan"], ["--timeout", "inf"],
    ["--timeout", "soon"], ["--no-such-option"],
])
def test_a_bad_argument_exits_1_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUTOVER_GATEWAY__LISTEN", "127.0.0.1:9")  # nothing is probed anyway
    try:
        status = healthcheck.main(argv)
    except SystemExit as exc:
        status = exc.code
    assert status == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert "cutover health" in err[-1] and ("timeout" in err[-1] or "no-such-option" in err[-1])
