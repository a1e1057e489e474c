# webhook-dispatcher worker image: the wheel and its runtime dependencies, no dev extra.
# Build:  docker build -t webhook-dispatcher:0.2.0 .
# Run:    docker run -e DISPATCHER_BROKER=kafka://kafka:9092 -e DISPATCHER_API_TOKEN=... webhook-dispatcher:0.2.0
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the project's wheel, installed with its dependencies into a virtualenv ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
COPY web ./web
# The same two steps tests/deploy/test_chart_command.py takes: `pip wheel --no-deps` of the repo,
# then a clean virtualenv holding only that wheel and what it depends on.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/webhook-dispatcher \
    && /opt/webhook-dispatcher/bin/pip install /wheels/webhook_dispatcher-*.whl \
    && /opt/webhook-dispatcher/bin/python -m compileall -q /opt/webhook-dispatcher/lib

# --- runtime ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="webhook-dispatcher" \
      org.opencontainers.image.description="Signed, ordered, at-least-once webhook delivery on Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can check it and fsGroup can match it.
RUN groupadd --system --gid 10001 dispatcher \
    && useradd --system --uid 10001 --gid dispatcher --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin dispatcher \
    && mkdir -p /var/lib/webhook-dispatcher \
    && chown 10001:10001 /var/lib/webhook-dispatcher
COPY --from=build /opt/webhook-dispatcher /opt/webhook-dispatcher
# Bytecode is compiled at build time and HOME is /tmp, so nothing is written beside the code and
# the root filesystem can be read-only (with a writable /tmp, as the chart and compose mount). The
# worker binds every interface: a container's loopback reaches nobody.
ENV PATH=/opt/webhook-dispatcher/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DISPATCHER_WEB_HOST=0.0.0.0 \
    DISPATCHER_WEB_PORT=8080 \
    DISPATCHER_DATA_DIR=/var/lib/webhook-dispatcher
WORKDIR /var/lib/webhook-dispatcher
USER 10001:10001
# RocksDB tables: keep them across restarts (recovery then reads only the changelog's tail).
VOLUME ["/var/lib/webhook-dispatcher"]
EXPOSE 8080
# Liveness only (the process serves HTTP); readiness (/readyz: tables recovered) is for the
# orchestrator to gate traffic on, not a reason to restart.
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('DISPATCHER_WEB_PORT', '8080') + '/healthz', timeout=2)"]
ENTRYPOINT ["webhook-dispatcher"]
CMD ["worker"]
