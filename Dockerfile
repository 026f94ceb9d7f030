# The image the ECS services run (terraform/: var.image). Build: docker build -t tally .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin tally

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/tally /usr/local/bin/tally
USER 65534:65534
# The root filesystem is read-only on ECS; the AWS backend writes nothing locally.
ENTRYPOINT ["tally"]
CMD ["count", "--log-json"]
