# The `flotilla` binary in a small, non-root runtime image, for users with a registry.
# scripts/image.sh builds the same image without pulling anything (see README).
#
#   docker build -t flotilla:latest .
#   docker run --rm flotilla:latest --help
#
# Build stage: the workspace's declared toolchain (rust-version in Cargo.toml). rustls + ring
# means no OpenSSL; ring only needs the C compiler this image already has. Without default
# features: the image has no use for `flotilla dev` / `flotilla bench` and the local
# clusters they start (the `dev` feature). The root filesystem is assembled by
# scripts/image.sh --rootfs, so both ways give one layout: the binary, exactly the shared
# libraries it links, CA certificates, /etc/passwd and /etc/group with `nonroot` (65532).
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p flotilla-cli --no-default-features --bin flotilla \
 && cp target/release/flotilla /usr/local/bin/flotilla \
 && bash scripts/image.sh --rootfs /rootfs --binary /usr/local/bin/flotilla

# Runtime: nothing but that root filesystem — no shell, no package manager.
FROM scratch
COPY --from=build /rootfs /
COPY --from=build --chown=65532:65532 /rootfs/home/nonroot /home/nonroot
ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/flotilla"]
CMD ["controller-manager"]
