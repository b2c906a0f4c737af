# syntax=docker/dockerfile:1
#
# The mcpmux container images. Three targets, all running the same stripped
# binary as the same non-root user (uid/gid 10001) with the same command:
#
#   docker build -t mcpmux .                                 # target "runtime" (the default):
#                                                            # distroless, no shell, no Node.js
#                                                            # or Python
#   docker build --target runtime-node -t mcpmux:node .      # plus Node.js LTS (npx) and uv (uvx)
#   docker build --target runtime-python -t mcpmux:python .  # plus Python 3 and uv (uvx)
#
#   docker run --rm -p 8080:8080 -e MCPMUX_API_KEY=KEY mcpmux   # serves the demo config;
#                                                            # clients send Authorization: Bearer KEY
#
# Then MCP is at http://localhost:8080/mcp (legacy HTTP+SSE at /sse).
# docs/operations-packaging.md says which target to use when.
#
# Configuration: every image reads /etc/mcpmux/config.yaml (the default
# config path, see CMD below). The images ship config/demo-container.yaml
# there: one upstream running mcpmux's bundled example server. Mount your own
# file (or, on Kubernetes, a ConfigMap) over /etc/mcpmux to replace it, and
# check it first with `mcpmux check FILE`.
#
# The tests in tests/it/deploy.rs read this file: the dependency layer's stubs
# (one for every target Cargo.toml declares), exactly one
# `cargo build --release --locked --bin mcpmux` after `COPY src`, the strip,
# the distroless default target, the Node.js LTS and Python variants, and
# that every runtime stage runs as a non-root USER and EXPOSEs 8080.

# uv and uvx for the runtime-node and runtime-python targets, copied from
# Astral's official image (static binaries).
ARG UV_VERSION=0.13.8
FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

# ---------------------------------------------------------------------------
# Build stage: the release binary, from the locked dependency set. Only the
# `mcpmux` binary: the package's other targets (the integration tests'
# upstream `mcpmux-fixture` in fixture/, benchmarks) are neither built nor
# shipped here.
FROM rust:1-bookworm AS build
WORKDIR /build

# The dependency layer. It depends on Cargo.toml and Cargo.lock only, so a
# change under src/ reuses it and recompiles mcpmux alone. So that Cargo
# sees the same package here as in the real build below, every target
# Cargo.toml declares gets a stub: src/main.rs and src/lib.rs (the package's
# binary and library), fixture/main.rs, benches/gateway/main.rs (the
# benchmark) and benches/soak/main.rs (the soak). A target added to Cargo.toml needs a stub here too
# (tests/it/deploy.rs fails until it has one).
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src fixture benches/gateway benches/soak \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > fixture/main.rs \
 && echo 'fn main() {}' > benches/gateway/main.rs \
 && echo 'fn main() {}' > benches/soak/main.rs
# Then remove what was built from the stubs: the stub sources under src/
# (COPY src below brings the real ones; the other stubs stay, so the package
# looks the same to Cargo in both builds) and mcpmux's own artifacts and
# fingerprints.
RUN cargo build --release --locked --bin mcpmux \
 && rm -rf src \
    target/release/mcpmux target/release/mcpmux.d \
    target/release/.fingerprint/mcpmux-* \
    target/release/deps/mcpmux-* target/release/deps/libmcpmux-*

# The crate itself: src/ and the config's JSON Schema are all it reads
# (src/config/demo.yaml, the embedded demo config, and
# docs/config.schema.json, printed by `mcpmux schema`, are compiled in).
COPY src ./src
COPY docs/config.schema.json ./docs/config.schema.json
# The copied sources keep their modification times from the build context
# and may be older than the stub's artifacts: the touch makes sure Cargo
# never takes the stub build as up to date. The release profile keeps line
# tables (for backtraces); the image does not need them: --strip-debug drops
# the debug sections and keeps the symbol table, so a panic's backtrace
# still names functions.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin mcpmux \
 && strip --strip-debug target/release/mcpmux

# ---------------------------------------------------------------------------
# Runtime stage (the default): distroless. glibc, libgcc, CA certificates
# (remote https:// upstreams are verified against them) and nothing else: no
# shell, no package manager. Stdio upstreams can only be programs in the
# image, i.e. mcpmux's own example server; use runtime-node or
# runtime-python for npx or uvx servers.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /build/target/release/mcpmux /usr/local/bin/mcpmux
# The default config path. Replace the file by mounting a directory (or a
# Kubernetes ConfigMap) at /etc/mcpmux that holds config.yaml.
COPY config/demo-container.yaml /etc/mcpmux/config.yaml
# A fixed numeric uid/gid (10001), the one deploy/kubernetes (runAsUser) and
# deploy/compose.yaml (user) use, in every target. (The distroless image's
# own "nonroot" user is 65532; a uid needs no /etc/passwd entry to run.)
USER 10001:10001
EXPOSE 8080
# No HEALTHCHECK: the image has no shell, curl or wget, and mcpmux needs no
# helper inside the image. Health is checked over HTTP from outside: on
# Kubernetes, the liveness probe is GET /healthz (200 while the process serves
# HTTP) and the readiness probe is GET /readyz (200 when every required
# upstream is ready and no optional one is in its first start, else 503 with
# each upstream's state as JSON); see deploy/kubernetes/base/deployment.yaml.
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
# For stdio upstreams started through npx (and uvx):
#
#   docker build --target runtime-node -t mcpmux:node .
#
# Node.js 24, an LTS line (supported into 2028), on the same Debian release
# as the build stage, plus uv/uvx. This image has no system Python: uvx
# downloads an interpreter the first time a server needs one (into /tmp, see
# below); use runtime-python when most servers are Python.
FROM node:24-bookworm-slim AS runtime-node
COPY --from=uv /uv /uvx /usr/local/bin/
# The same uid/gid as the runtime stage, with a passwd entry for tools that
# look their user up, and /tmp as its home.
RUN groupadd --system --gid 10001 mcpmux \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin mcpmux
COPY --from=build /build/target/release/mcpmux /usr/local/bin/mcpmux
COPY config/demo-container.yaml /etc/mcpmux/config.yaml
# npx and uvx download packages (and uvx, when a server needs it, a Python
# interpreter) at run time. With a read-only root filesystem only /tmp is
# writable (an emptyDir on Kubernetes, a tmpfs in deploy/compose.yaml), so
# their caches and the home directory live there.
ENV HOME=/tmp \
    npm_config_cache=/tmp/npm-cache \
    npm_config_update_notifier=false \
    UV_CACHE_DIR=/tmp/uv-cache \
    UV_PYTHON_INSTALL_DIR=/tmp/uv-python \
    UV_TOOL_DIR=/tmp/uv-tools
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["mcpmux"]
CMD ["serve", "--config", "/etc/mcpmux/config.yaml", "--listen", "0.0.0.0:8080", "--log-format", "json"]

# ---------------------------------------------------------------------------
# For the many MCP servers published as Python packages (uvx SERVER):
#
#   docker build --target runtime-python -t mcpmux:python .
#
# Python 3.13 with uv/uvx, on the same Debian release as the build stage.
# uvx uses this Python unless a server asks for another version, which it
# then downloads into /tmp.
FROM python:3.13-slim-bookworm AS runtime-python
COPY --from=uv /uv /uvx /usr/local/bin/
RUN groupadd --system --gid 10001 mcpmux \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin mcpmux
COPY --from=build /build/target/release/mcpmux /usr/local/bin/mcpmux
COPY config/demo-container.yaml /etc/mcpmux/config.yaml
# As in runtime-node: caches under the writable /tmp.
ENV HOME=/tmp \
    UV_CACHE_DIR=/tmp/uv-cache \
    UV_PYTHON_INSTALL_DIR=/tmp/uv-python \
    UV_TOOL_DIR=/tmp/uv-tools \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["mcpmux"]
CMD ["serve", "--config", "/etc/mcpmux/config.yaml", "--listen", "0.0.0.0:8080", "--log-format", "json"]

# ---------------------------------------------------------------------------
# The default target: a plain `docker build .` builds the last stage, so this
# one repeats "runtime" (the distroless image).
FROM runtime AS default
