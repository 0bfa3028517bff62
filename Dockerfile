# The leasehold image: the release binary on a small non-root base.
#   docker build -t leasehold:0.1.0 .
# The build stage runs the same build as the project's benchmarks and
# release (`cargo build --release --locked -p leasehold`); the runtime stage
# holds the binary only. The DaemonSet (deploy/) passes `run …` as args.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p leasehold

# glibc + libgcc, CA certificates, /etc/passwd with `nonroot` (65532); no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER 65532:65532
EXPOSE 6791
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["run", "-c", "/etc/leasehold/leasehold.yml", "--path.data", "/var/lib/leasehold"]
