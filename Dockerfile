# syntax=docker/dockerfile:1.7
# The image the ECS services run (terraform/: var.image, pinned by digest).
#   docker build -t tally .                                  (linux/amd64)
#   docker buildx build --platform linux/arm64 -t tally .   (cpu_architecture = "ARM64")
#
# Base images: pin them by digest for a reproducible build, e.g.
#   --build-arg RUST_IMAGE=rust:1.95-bookworm@sha256:<digest>
#   --build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:<digest>
# (`docker buildx imagetools inspect <image>` prints the digest; see docs/RUNBOOK.md).
ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# BuildKit caches the registry and the target directory between builds, so an edit rebuilds
# tally's own crates, not the AWS SDK. The image gets a binary without debug info (about 22 MB
# instead of about 150 MB with the line tables the benchmarks keep).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin tally \
    && cp target/release/tally /tally

# distroless/cc: glibc, libgcc and CA certificates, no shell, no package manager; runs as nonroot.
FROM ${RUNTIME_IMAGE}
COPY --from=build /tally /usr/local/bin/tally
USER 65532:65532
# The root filesystem is read-only on ECS; the AWS backend writes nothing locally.
ENTRYPOINT ["/usr/local/bin/tally"]
CMD ["count", "--log-json"]
