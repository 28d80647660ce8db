# The `flotilla` binary in a small, non-root runtime image.
#
#   docker build -t flotilla:latest .
#   docker run --rm flotilla:latest --help
#
# Build stage: the workspace's declared toolchain (rust-version in Cargo.toml). rustls + ring
# means no OpenSSL; ring only needs the C compiler this image already has. Without default
# features: the image has no use for `flotilla dev` / `flotilla bench` and the local
# clusters they start (the `dev` feature).
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p flotilla-cli --no-default-features --bin flotilla \
 && cp target/release/flotilla /usr/local/bin/flotilla

# Runtime: glibc, CA certificates and a `nonroot` user (65532), nothing else — no shell,
# no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/flotilla /usr/local/bin/flotilla
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/flotilla"]
CMD ["controller-manager"]
