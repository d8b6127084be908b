# syntax=docker/dockerfile:1
#
# The rocketdelay container image: one static binary on distroless, running as a
# non-root numeric user, writing nothing to its root filesystem (so Kubernetes can run
# it with readOnlyRootFilesystem). Build it from the repository root:
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     -t registry.example.com/rocketdelay:"$(git describe --tags --always --dirty)" .
#
# .git is not in the build context (see .dockerignore): the version comes from the
# VERSION build argument only. deploy/k8s/dockerfile_test.go checks the invariants
# of this file; deploy/k8s/README.md explains how the image is deployed.

# Exactly the toolchain line of go.mod: the Go that make test and make vulncheck judged.
ARG GO_VERSION=1.26.11

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# Dependencies first, so the module cache layer survives changes to the code.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/rocketdelay/rocketdelay/app.Version=${VERSION}" \
      -o /out/rocketdelay ./cmd/rocketdelay

# static-debian12: CA certificates (DingTalk is HTTPS), tzdata, /etc/passwd with the
# nonroot user 65532; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rocketdelay /rocketdelay
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/rocketdelay"]
CMD ["serve", "-f", "/etc/rocketdelay/config.yaml"]
