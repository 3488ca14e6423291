# syntax=docker/dockerfile:1
#
# toolmesh's images for a CI with a container daemon; `make images` builds the same three
# programs without one (on a base it makes itself, where this file uses distroless). One
# image per program:
#
#   docker build --build-arg PKG=./cmd/orchestrator -t toolmesh/orchestrator .
#   docker build --build-arg PKG=./cmd/toolworker   -t toolmesh/toolworker .
#   docker build --build-arg PKG=./cmd/toolmesh     -t toolmesh/toolmesh .
#
# A team's own worker (a program on pkg/worker in its own module) builds with this file
# copied into its repository: docker build --build-arg PKG=./cmd/my-worker .
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG PKG=./cmd/orchestrator
ARG VERSION=dev
# The version the binaries report (-version, logs); a program of another module ignores it.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/toolmesh/toolmesh/internal/cli.version=${VERSION}" -o /out/app "${PKG}"

# Static binaries on distroless: no shell, CA certificates and tzdata, user 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG PKG=./cmd/orchestrator
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/toolmesh/toolmesh" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.toolmesh.package="${PKG}"
COPY --from=build /out/app /usr/local/bin/app
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/app"]
