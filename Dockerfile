# syntax=docker/dockerfile:1
# Multi-stage: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# -tags nodemo: the demo needs a source checkout; the image says so instead.
RUN CGO_ENABLED=0 go build -tags nodemo -trimpath \
      -ldflags "-s -w -X github.com/hcpbot/hcpbot/internal/version.Version=${VERSION} -X github.com/hcpbot/hcpbot/internal/version.Commit=${COMMIT}" \
      -o /out/hcpbot ./cmd/hcpbot

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hcpbot /usr/local/bin/hcpbot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hcpbot"]
