# syntax=docker/dockerfile:1
# A static cairn binary (glibc, libstdc++ for RocksDB and libgcc linked in) on distroless.
#   docker build -t cairn .        docker run -p 9092:9092 -p 9644:9644 cairn
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
COPY src src
COPY vendor vendor
ARG CAIRN_GIT_REVISION=unknown
ENV CAIRN_GIT_REVISION=${CAIRN_GIT_REVISION}
# RUSTFLAGS replaces .cargo/config.toml's flags, so the CPU features are repeated here;
# naming the target keeps crt-static off build scripts and proc macros.
ENV RUSTFLAGS="-C target-feature=+crt-static,+sse4.2,+pclmulqdq,+popcnt"
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/cairn /cairn \
 && mkdir -p /empty

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cairn /usr/local/bin/cairn
COPY --from=build --chown=65532:65532 /empty /var/lib/cairn
ENV KAFKA_LOG_DIRS=/var/lib/cairn \
    KAFKA_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    KAFKA_METRICS_LISTENER=0.0.0.0:9644
VOLUME /var/lib/cairn
EXPOSE 9092 9644
HEALTHCHECK --interval=5s --timeout=5s --retries=12 CMD ["/usr/local/bin/cairn", "healthcheck", "127.0.0.1:9644"]
ENTRYPOINT ["/usr/local/bin/cairn"]
