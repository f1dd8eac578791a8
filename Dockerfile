# floodgate's image: built from a clean checkout, run as a non-root user on a read-only root
# filesystem (nothing is written outside the state file's folder, if one is configured).
#
# The two bases are pinned by version, and the build uses them with --pull=never:
# - BUILDER: the Rust toolchain on Debian 12 with a C compiler, libssl-dev and pkg-config
#   (librdkafka is compiled from source and links the system's OpenSSL);
# - RUNTIME: a distroless Debian 12 base (glibc, libgcc, libssl3, CA certificates, tzdata, no
#   shell, no package manager), as user 65532.
# With a registry, pin them by digest as well: --build-arg BUILDER=...@sha256:... Without one
# (this project's CI), scripts/image.sh makes both under these names from Debian's own packages
# and the machine's Rust toolchain, then builds this file.
ARG BUILDER=docker.io/library/rust:1.95.0-bookworm
ARG RUNTIME=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER} AS build
WORKDIR /src
# .dockerignore lets in only what cargo reads: the manifests, the lock file and the sources of
# every workspace member and target the manifest names.
COPY . .
# zlib is linked statically here (the runtime base has no libz; a local build links the
# system's); OpenSSL stays the system's libssl3, which the runtime base carries.
ENV LIBZ_SYS_STATIC=1 CARGO_TERM_COLOR=never
# The `image` profile: release, without debug info, stripped (Cargo.toml). cargo's registry
# and target folder are cache mounts, so a rebuild on the same machine recompiles only what
# changed; the binary is copied out of the cache before the stage ends.
RUN --mount=type=cache,id=floodgate-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=floodgate-target,target=/src/target \
    cargo build --profile image --locked --bin floodgate \
    && mkdir -p /out \
    && cp target/image/floodgate /out/floodgate

FROM ${RUNTIME}
COPY --from=build /out/floodgate /usr/local/bin/floodgate
# Numeric, so Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 65532:65532
# Produce API and admin API (/healthz, /readyz, /metrics): the configuration decides the
# addresses; inside a container they listen on 0.0.0.0 (deploy/kubernetes/base/floodgate.toml).
EXPOSE 8080 9090
# Mount the configuration here (a ConfigMap); every secret comes from the environment or a
# mounted file (FLOODGATE_ADMIN_TOKEN or FLOODGATE_ADMIN_TOKEN_FILE, and so on: book, "Deploy").
ENV FLOODGATE_CONFIG=/etc/floodgate/floodgate.toml
# Exec form, no shell in between: SIGTERM reaches floodgate itself, which stops taking
# requests, drains within [server] shutdown_timeout_ms and exits 0 when Kafka has confirmed
# every accepted record.
ENTRYPOINT ["/usr/local/bin/floodgate"]
CMD ["run"]
