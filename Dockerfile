# Multi-stage build: compile with the full toolchain (librdkafka, OpenSSL and zlib are built
# from source and linked statically), run on a slim Debian.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin floodgate

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 floodgate
COPY --from=build /src/target/release/floodgate /usr/local/bin/floodgate
USER floodgate
# Mount the configuration at /etc/floodgate/floodgate.toml; listen on 0.0.0.0 inside the
# container with FLOODGATE__SERVER__LISTEN=0.0.0.0:8080 FLOODGATE__SERVER__ADMIN_LISTEN=0.0.0.0:9090.
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/floodgate", "--config", "/etc/floodgate/floodgate.toml"]
