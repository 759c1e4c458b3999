# syntax=docker/dockerfile:1
# cutover: a Replicate-compatible gateway sidecar.
#
#   docker build -t cutover .
#   docker run -p 8443:8443 -v $PWD/cutover.toml:/etc/cutover/cutover.toml:ro \
#     -v $PWD/tls:/etc/cutover/tls:ro -v cutover-data:/var/lib/cutover cutover
#
# (tls/ holds cert.pem and key.pem, the paths examples/cutover.example.toml names; drop
# that mount and both tls_ keys to serve plain HTTP.)
#
# The image listens on 0.0.0.0:8443, the port it EXPOSEs: CUTOVER_GATEWAY__LISTEN is set
# below, and the environment wins over the file's `listen` (to move it, pass
# -e CUTOVER_GATEWAY__LISTEN=0.0.0.0:PORT and publish PORT). examples/cutover.example.toml
# shows every key. Keep database_url and storage_url under /var/lib/cutover (the volume),
# e.g. sqlite+aiosqlite:////var/lib/cutover/cutover.db and file:///var/lib/cutover/assets.
# Both the gateway and its health check read $CUTOVER_CONFIG (/etc/cutover/cutover.toml)
# and then the CUTOVER_* environment (CUTOVER_GATEWAY__LISTEN, ..._TLS_CERT_FILE, ...):
# `cutover health` GETs /ready where `cutover serve` listens, over HTTPS with the
# configured certificate as its only trust anchor when one is set (README, "Container").
#
# Dependencies come from requirements.lock (every package pinned ==, with its hashes,
# installed with --require-hashes), generated from pyproject.toml with the `chaos` extra so
# that `docker run ... cutover chaos` works in the image; README "Container" says how to
# refresh it. tests/unit/test_dockerfile.py checks this file against the lock and the
# settings (no Docker engine needed).

# --- builder: the locked dependencies, then a wheel of the project, into a venv -----------
FROM python:3.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/venv
COPY requirements.lock ./
RUN /opt/venv/bin/pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY adapters ./adapters
COPY gateway ./gateway
COPY shadow ./shadow
COPY chaos ./chaos
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-deps /wheels/*.whl \
 && /opt/venv/bin/pip check

# --- runtime: the venv only, run by an unprivileged user --------------------------------
FROM python:3.11-slim AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    CUTOVER_CONFIG=/etc/cutover/cutover.toml \
    CUTOVER_GATEWAY__LISTEN=0.0.0.0:8443 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

RUN groupadd --system --gid 10001 cutover \
 && useradd --system --uid 10001 --gid cutover --home-dir /var/lib/cutover \
      --shell /usr/sbin/nologin cutover \
 && mkdir -p /etc/cutover /var/lib/cutover/assets \
 && chown -R cutover:cutover /var/lib/cutover

COPY --from=builder /opt/venv /opt/venv

USER cutover:cutover
WORKDIR /var/lib/cutover
VOLUME ["/var/lib/cutover"]
EXPOSE 8443

# /ready on the listener the gateway's own settings name (file + environment: the
# CUTOVER_GATEWAY__LISTEN above, so 127.0.0.1:8443); exit 0/1.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["cutover", "health", "--timeout", "4"]

ENTRYPOINT ["cutover"]
CMD ["serve"]
