# syntax=docker/dockerfile:1
#
# The mcpmux container image.
#
#   docker build -t mcpmux .                             # the default image (target "runtime")
#   docker build --target runtime-node -t mcpmux:node .  # plus Node.js (npx) and Python (uvx)
#   docker run --rm -p 8080:8080 -e MCPMUX_API_KEY=KEY mcpmux   # serves the demo config;
#                                                        # clients send Authorization: Bearer KEY
#
# Then MCP is at http://localhost:8080/mcp (legacy HTTP+SSE at /sse).
#
# Configuration: the image reads /etc/mcpmux/config.yaml (the default config
# path, see CMD below). The image ships config/demo-container.yaml there: one
# upstream running mcpmux's bundled example server. Mount your own file (or,
# on Kubernetes, a ConfigMap) over /etc/mcpmux to replace it, and check it
# first with `mcpmux check --config FILE`.
#
# The tests in tests/it/deploy.rs read this file: the build stage must run
# exactly `cargo build --release --locked --bin mcpmux`, and the runtime stages
# must run as a non-root USER and EXPOSE 8080.

# ---------------------------------------------------------------------------
# Build stage: the release binary, from the locked dependency set. Only the
# `mcpmux` binary: the package's other one, `mcpmux-fixture` (fixture/), is the
# integration tests' upstream and is neither built nor shipped here.
FROM rust:1-bookworm AS build
WORKDIR /build
# Cargo.toml, Cargo.lock, src/ and the config's JSON Schema are all the build
# reads (src/config/demo.yaml, the embedded demo config, and
# docs/config.schema.json, printed by `mcpmux schema`, are compiled in).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY docs/config.schema.json ./docs/config.schema.json
RUN cargo build --release --locked --bin mcpmux

# ---------------------------------------------------------------------------
# Runtime stage: Debian slim, the binary, CA certificates and a non-root user.
FROM debian:bookworm-slim AS runtime
# ca-certificates: remote (https://) upstreams are verified against the
# platform's certificate roots.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# A fixed uid/gid (10001) so Kubernetes' runAsUser and compose's `user` match it.
RUN groupadd --system --gid 10001 mcpmux \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin mcpmux
COPY --from=build /build/target/release/mcpmux /usr/local/bin/mcpmux
# The default config path. Replace the file by mounting a directory (or a
# Kubernetes ConfigMap) at /etc/mcpmux that holds config.yaml.
COPY config/demo-container.yaml /etc/mcpmux/config.yaml
USER 10001
EXPOSE 8080
# No HEALTHCHECK: the slim image has no curl or wget, and mcpmux needs no
# helper inside the image. Health is checked over HTTP from outside: on
# Kubernetes, the liveness probe is GET /healthz (200 while the process serves
# HTTP) and the readiness probe is GET /readyz (200 when every required
# upstream is ready, else 503 with each upstream's state as JSON); see
# deploy/kubernetes/deployment.yaml.
#
# mcpmux exits on SIGTERM or SIGINT after draining in-flight requests for up
# to `shutdown_grace` (10s by default) and stopping its stdio children, so
# give `docker stop` (-t) or Kubernetes (terminationGracePeriodSeconds) more
# time than that.
ENTRYPOINT ["mcpmux"]
# In a container mcpmux must listen on all interfaces, not on the loopback
# default (127.0.0.1:8080); --listen overrides `listen` in the config.
CMD ["serve", "--config", "/etc/mcpmux/config.yaml", "--listen", "0.0.0.0:8080", "--log-format", "json"]

# ---------------------------------------------------------------------------
# Optional target for stdio upstreams started through npx or uvx:
#
#   docker build --target runtime-node -t mcpmux:node .
#
# Adds Debian's Node.js and npm (npx) and Python 3 with venv, plus uv (uvx)
# installed with pip into its own venv, as Debian bookworm does not package
# it. Debian bookworm's Node.js is version 18; a server that needs a newer
# Node.js needs a different base image.
FROM runtime AS runtime-node
USER root
ARG UV_VERSION=0.13.8
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/uv \
 && /opt/uv/bin/pip install --no-cache-dir "uv==${UV_VERSION}" \
 && ln -s /opt/uv/bin/uv /opt/uv/bin/uvx /usr/local/bin/
# npx and uvx download packages (and uvx, when a server needs a newer Python
# than Debian's 3.11, an interpreter) at run time. With a read-only root
# filesystem only /tmp is writable (an emptyDir on Kubernetes, a tmpfs in
# deploy/compose.yaml), so their caches live there.
ENV npm_config_cache=/tmp/npm-cache \
    UV_CACHE_DIR=/tmp/uv-cache \
    UV_PYTHON_INSTALL_DIR=/tmp/uv-python
USER 10001

# ---------------------------------------------------------------------------
# The default target: a plain `docker build .` builds the image without
# Node.js (the last stage is the default, so this one repeats "runtime").
FROM runtime AS default
