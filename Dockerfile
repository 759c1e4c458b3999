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
# The config must listen on 0.0.0.0:8443 inside the container (examples/cutover.example.toml
# shows every key). Keep database_url and storage_url under /var/lib/cutover (the volume),
# e.g. sqlite+aiosqlite:////var/lib/cutover/cutover.db and file:///var/lib/cutover/assets.
# Both the gateway and its health check read $CUTOVER_CONFIG (/etc/cutover/cutover.toml)
# and then the CUTOVER_* environment (CUTOVER_GATEWAY__LISTEN, ..._TLS_CERT_FILE, ...):
# `cutover health` GETs /ready where `cutover serve` listens, over HTTPS with the
# configured certificate as its only trust anchor when one is set (README, "Container").

# --- builder: a wheel of the project, installed with its dependencies into a venv ---------
FROM python:3.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY adapters ./adapters
COPY gateway ./gateway
COPY shadow ./shadow
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install /wheels/*.whl

# --- runtime: the venv only, run by an unprivileged user --------------------------------
FROM python:3.11-slim AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    CUTOVER_CONFIG=/etc/cutover/cutover.toml \
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

# /ready on the listener the gateway's own settings name (file + environment); exit 0/1.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["cutover", "health", "--timeout", "4"]

ENTRYPOINT ["cutover"]
CMD ["serve"]
