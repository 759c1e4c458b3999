"""`make demo`: the unmodified ``replicate`` client -> cutover (HTTPS) -> a real Cog server.

On a fresh clone with nothing else running, this script

1. picks two free loopback ports and empties its work dir, ``.demo/`` (kept afterwards);
2. makes a CA and a leaf certificate for 127.0.0.1 (the Python client treats only https:
   URLs as files, and Cog, which posts its webhooks to the gateway, must trust it);
3. starts the real Cog server with ``examples/echo`` in its own process group and waits for
   ``/health-check`` to say READY;
4. writes ``.demo/cutover.toml`` (SQLite file, local storage, HTTPS, one token, one route
   for ``acme/echo``) and starts ``cutover serve`` in its own process group, waiting for
   ``/health``;
5. drives the gateway like a legacy app would: ``replicate.Client(api_token=...,
   base_url=...)``, then ``run``, ``predictions.create`` + ``wait``, a file output read
   back, and a cancel of a slow prediction;
6. says where the job rows and the output files are;
7. stops both process groups (SIGTERM, then SIGKILL), also on Ctrl-C or failure.

Exit status: 0 when every step did what it should; 1 otherwise, after the tails of the
gateway's and Cog's logs; 130 on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import httpx
import replicate
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from replicate.exceptions import ReplicateError
from replicate.helpers import FileOutput

ROOT = Path(__file__).resolve().parent.parent
ECHO_DIR = ROOT / "examples" / "echo"
WORK = ROOT / ".demo"
VENV_BIN = Path(sys.executable).parent  # the venv running this script: python, cutover
MODEL = "acme/echo"
VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
TERMINAL = frozenset({"succeeded", "failed", "canceled"})

COG_READY_S = 90.0
GATEWAY_READY_S = 30.0
STEP_S = 60.0
STOP_GRACE_S = 10.0
POLL_INTERVAL_S = 0.2


class DemoError(Exception):
    """A step did not do what it should; the message says which step and what happened."""


@dataclass(frozen=True)
class Tls:
    """PEM files: the CA apps and Cog trust, and the gateway's leaf certificate and key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Service:
    """A process the demo started, leader of its own process group, and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


def say(line: str) -> None:
    print(line, flush=True)


def rel(path: Path) -> str:
    """``path`` relative to the current directory when it is below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


# --- set-up: ports, work dir, certificates ------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all bound at once, then released)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def fresh_work_dir(work: Path = WORK) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("tmp", "assets"):
        (work / sub).mkdir(parents=True)
    return work


def _key_usage(**flags: bool) -> x509.KeyUsage:
    names = (
        "digital_signature content_commitment key_encipherment data_encipherment "
        "key_agreement key_cert_sign crl_sign encipher_only decipher_only"
    ).split()
    return x509.KeyUsage(**{name: flags.get(name, False) for name in names})


def _cert_builder(subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey):
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )


def make_tls(folder: Path) -> Tls:
    """A CA and a leaf for IP 127.0.0.1 signed by it (rustls refuses a self-signed leaf)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cutover demo CA")])
    ca_cert = (
        _cert_builder("cutover demo CA", ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    leaf = (
        _cert_builder("127.0.0.1", ca_name, leaf_key)
        .add_extension(x509.SubjectAlternativeName(san), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        .add_extension(_key_usage(digital_signature=True), True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    tls = Tls(ca=folder / "ca.pem", cert=folder / "cert.pem", key=folder / "key.pem")
    tls.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    tls.key.touch(mode=0o600)
    tls.key.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tls


# --- processes -----------------------------------------------------------------------------


def start(name: str, argv: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> Service:
    """Start ``argv`` as the leader of a new session (so of its own process group)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own argv, no shell
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Service(name=name, proc=proc, log=log)


def _signal_group(service: Service, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(service.proc.pid, signum)


def stop(service: Service) -> None:
    """SIGTERM the service's group; SIGKILL it after ``STOP_GRACE_S`` or for stragglers."""
    _signal_group(service, signal.SIGTERM)
    try:
        service.proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        say(f"   {service.name} did not stop within {STOP_GRACE_S:.0f} s: SIGKILL")
    _signal_group(service, signal.SIGKILL)  # the group's other members, if any are left
    service.proc.wait()


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, *, alive: Service) -> None:
    """Call ``check`` until it is true; fail if ``alive`` exits or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive.proc.poll() is not None:
            raise DemoError(f"{alive.name} exited (status {alive.proc.returncode}) before {what}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if check():
                return
        time.sleep(POLL_INTERVAL_S)
    raise DemoError(f"{what}: not within {timeout_s:.0f} s")


def start_cog(
    work: Path,
    port: int,
    tls: Tls,
    *,
    model_dir: Path = ECHO_DIR,
    stub: str = "predict.py:Predictor",
    name: str = "Cog",
    env: dict[str, str] | None = None,
) -> Service:
    """The real Cog server for ``model_dir`` (``stub`` picks the predictor class), logging
    to ``work/<name>.log`` (lower case); ``env`` adds to its environment."""
    if not (model_dir / "predict.py").is_file():
        raise DemoError(f"no model at {rel(model_dir / 'predict.py')}")
    full_env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # Cog's worker
        "PORT": str(port),
        "COG_PREDICT_TYPE_STUB": stub,
        "SSL_CERT_FILE": str(tls.ca),  # Cog posts its webhooks to the gateway over HTTPS
        "TMPDIR": str(work / "tmp"),  # the model's output files land here, not in /tmp
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in the model's folder
        **(env or {}),
    }
    argv = [sys.executable, "-m", "cog.server.http", "--host", "127.0.0.1"]
    log = work / f"{name.lower().replace(' ', '-')}.log"
    return start(name, argv, cwd=model_dir, env=full_env, log=log)


def cog_ready(port: int) -> bool:
    reply = httpx.get(f"http://127.0.0.1:{port}/health-check", timeout=2.0)
    return reply.json().get("status") == "READY"


def write_config(work: Path, *, gw_port: int, cog_port: int, tls: Tls, token: str) -> Path:
    """The gateway's TOML config (keys as in examples/cutover.example.toml)."""
    q = json.dumps  # a JSON string is a valid TOML basic string for these values
    config = work / "cutover.toml"
    config.write_text(
        f"""# written by examples/demo.py
[gateway]
listen = {q(f"127.0.0.1:{gw_port}")}
public_url = {q(f"https://127.0.0.1:{gw_port}")}
tls_cert_file = {q(str(tls.cert))}
tls_key_file = {q(str(tls.key))}
database_url = {q(f"sqlite+aiosqlite:///{work / 'cutover.db'}")}
storage_url = {q((work / "assets").as_uri())}
api_tokens = [{q(token)}]

[webhooks]
allow_hosts = ["127.0.0.1"]

[providers.local-cog]
kind = "cog"
base_url = {q(f"http://127.0.0.1:{cog_port}")}

[[routes]]
model = {q(MODEL)}
version = {q(VERSION)}
provider = "local-cog"
"""
    )
    return config


def start_gateway(work: Path, config: Path) -> Service:
    cutover = VENV_BIN / "cutover"
    if not cutover.exists():
        raise DemoError(f"no {cutover}: build the project first (make demo does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}  # file only
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    argv = [str(cutover), "serve", "--config", str(config)]
    return start("gateway", argv, cwd=ROOT, env=env, log=work / "gateway.log")


def gateway_ready(base_url: str, ca: ssl.SSLContext) -> bool:
    return httpx.get(f"{base_url}/health", verify=ca, timeout=2.0).status_code == 200


# --- the legacy app's side ------------------------------------------------------------------


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise DemoError if the block runs longer than ``seconds`` (the client polls forever)."""

    def expire(signum: int, frame: object) -> None:
        raise DemoError(f"{what}: still going after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def expect(condition: bool, problem: str) -> None:
    if not condition:
        raise DemoError(problem)


def step_run(client: replicate.Client) -> None:
    say(f'== 1/4 client.run("{MODEL}:{VERSION[:8]}...", input={{"prompt": "hello from cutover"}})')
    started = time.monotonic()
    with time_limit(STEP_S, "run()"):
        output = client.run(f"{MODEL}:{VERSION}", input={"prompt": "hello from cutover"})
    expect(output == "HELLO FROM CUTOVER", f"run() returned {output!r}")
    say(f"   -> {output!r} ({since(started)})")


def step_create_wait(client: replicate.Client) -> None:
    inputs = {"prompt": "step by step", "steps": 3, "delay": 0.2}
    say(f"== 2/4 predictions.create(version=..., input={json.dumps(inputs)}) then wait()")
    started = time.monotonic()
    with time_limit(STEP_S, "create + wait()"):
        prediction = client.predictions.create(version=VERSION, input=inputs)
        first = prediction.status
        prediction.wait()
    expect(prediction.status == "succeeded", f"{prediction.id} ended {prediction.status}")
    expect(prediction.output == "STEP BY STEP", f"output was {prediction.output!r}")
    logs = " | ".join((prediction.logs or "").strip().splitlines()) or "(none)"
    say(f"   -> {prediction.id}: {first} -> {prediction.status}, output {prediction.output!r}")
    say(f"      logs: {logs} ({since(started)})")


def step_file(client: replicate.Client, base_url: str) -> None:
    say('== 3/4 a file output: client.run(..., input={..., "output_kind": "file"}).read()')
    started = time.monotonic()
    with time_limit(STEP_S, "run() with a file output"):
        output = client.run(
            f"{MODEL}:{VERSION}", input={"prompt": "a file from cutover", "output_kind": "file"}
        )
        expect(isinstance(output, FileOutput), f"expected a file URL, got {output!r}")
        content = output.read()
    expect(output.url.startswith(f"{base_url}/"), f"{output.url} is not the gateway's URL")
    expect(content == b"A FILE FROM CUTOVER", f"read() returned {content!r}")
    say(f"   -> {output.url}")
    say(f"      from the gateway's own storage; read() -> {content!r} ({since(started)})")


def step_cancel(client: replicate.Client) -> None:
    inputs = {"prompt": "cancel me", "steps": 40, "delay": 0.25}
    say(f"== 4/4 cancel: predictions.create(input={json.dumps(inputs)}), cancel() once processing")
    started = time.monotonic()
    with time_limit(STEP_S, "cancel"):
        prediction = client.predictions.create(version=VERSION, input=inputs)
        while prediction.status != "processing":
            expect(prediction.status not in TERMINAL, f"ended {prediction.status} too early")
            time.sleep(POLL_INTERVAL_S)
            prediction.reload()
        say(f"   -> {prediction.id} is processing after {since(started)}: cancel()")
        canceled_at = time.monotonic()
        prediction.cancel()
        while prediction.status not in TERMINAL:
            time.sleep(POLL_INTERVAL_S)
            prediction.reload()
    expect(prediction.status == "canceled", f"{prediction.id} ended {prediction.status}")
    say(f"   -> {prediction.status} {since(canceled_at)} after cancel() (total {since(started)})")


def tour(base_url: str, token: str, tls: Tls) -> None:
    os.environ["SSL_CERT_FILE"] = str(tls.ca)  # how the app's httpx trusts the gateway
    say(f"== the app: replicate.Client(api_token={token[:8]!r}+..., base_url={base_url!r})")
    version = metadata.version("replicate")
    say(f"   with SSL_CERT_FILE={rel(tls.ca)}; replicate {version}, unmodified")
    client = replicate.Client(api_token=token, base_url=base_url)
    step_run(client)
    step_create_wait(client)
    step_file(client, base_url)
    step_cancel(client)


# --- where things are -----------------------------------------------------------------------


JOB_COLUMNS = ("id", "state", "raw_status", "provider", "provider_job_id", "created_at")


def show_records(work: Path) -> None:
    """Print where the job rows and the output files are, with a query to try."""
    db = work / "cutover.db"
    expect(db.is_file(), f"no SQLite file at {rel(db)}")
    with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        table = "jobs" if "jobs" in tables else next((t for t in tables if "job" in t), None)
        expect(table is not None, f"no job table in {rel(db)} (tables: {tables})")
        present = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
        columns = ", ".join(c for c in JOB_COLUMNS if c in present) or "*"
        order = "created_at" if "created_at" in present else "rowid"
        query = f"SELECT {columns} FROM {table} ORDER BY {order}"  # noqa: S608 - our names
        rows = conn.execute(query).fetchall()
    say(f"== job rows: {len(rows)} in table {table} of the SQLite file {rel(db)}")
    for row in rows:
        say("   " + " | ".join(str(value) for value in row))
    say(f'   try: sqlite3 {rel(db)} "{query}"')
    assets = sorted(path for path in (work / "assets").rglob("*") if path.is_file())
    say(f"== output files: {len(assets)} under {rel(work / 'assets')}/")
    for path in assets:
        say(f"   {rel(path)} ({path.stat().st_size} bytes)")


def show_log_tails(services: list[Service]) -> None:
    for service in services:
        lines = 60 if service.name == "gateway" else 30
        say(f"--- {service.name} log, last {lines} lines ({rel(service.log)})")
        with contextlib.suppress(OSError):
            for line in service.log.read_text(errors="replace").splitlines()[-lines:]:
                say(f"    {line}")


# --- the whole run ---------------------------------------------------------------------------


def demo(services: list[Service]) -> None:
    """Steps 1-6; every started service is appended to ``services`` at once, for cleanup."""
    cog_port, gw_port = free_ports(2)
    work = fresh_work_dir()
    base_url = f"https://127.0.0.1:{gw_port}"
    say(f"== work dir {rel(work)}/; Cog on 127.0.0.1:{cog_port}, gateway on {base_url}")
    tls = make_tls(work)
    say(f"== made a CA ({rel(tls.ca)}) and a certificate for 127.0.0.1 ({rel(tls.cert)})")

    started = time.monotonic()
    services.append(cog := start_cog(work, cog_port, tls))
    wait_until("Cog was READY", lambda: cog_ready(cog_port), COG_READY_S, alive=cog)
    say(f"== Cog server with examples/echo is READY ({since(started)}, log {rel(cog.log)})")

    token = f"r8_demo_{secrets.token_hex(16)}"
    config = write_config(work, gw_port=gw_port, cog_port=cog_port, tls=tls, token=token)
    started = time.monotonic()
    services.append(gateway := start_gateway(work, config))
    ca = ssl.create_default_context(cafile=str(tls.ca))
    wait_until(
        "/health answered", lambda: gateway_ready(base_url, ca), GATEWAY_READY_S, alive=gateway
    )
    say(f"== cutover serve --config {rel(config)} is up ({since(started)}, log {rel(gateway.log)})")

    tour(base_url, token, tls)
    show_records(work)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM: clean up as for Ctrl-C


def main(run: Callable[[list[Service]], None] = demo, work: Path = WORK) -> int:
    """Run ``run`` (the steps; it appends each service it starts), then stop every service
    it started; the exit status (0, 1 after the logs' tails, 130 on Ctrl-C)."""
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    services: list[Service] = []
    status = 1
    try:
        run(services)
        status = 0
    except KeyboardInterrupt:
        say("== interrupted")
        status = 130
    except Exception as exc:  # noqa: BLE001 - any failure: say what, show the logs, exit 1
        if not isinstance(exc, DemoError | ReplicateError | httpx.HTTPError):
            traceback.print_exc()  # not one of the failures a step reports by itself
        say(f"== FAILED: {type(exc).__name__}: {exc}")
        show_log_tails(services)
    finally:
        if services:
            say(f"== stopping {' and '.join(s.name for s in reversed(services))}")
        for service in reversed(services):
            stop(service)
    verdict = {0: "demo passed", 130: "demo interrupted"}.get(status, "demo FAILED")
    say(f"== {verdict} in {since(started)}; files kept in {rel(work)}/")
    return status


if __name__ == "__main__":
    sys.exit(main())
