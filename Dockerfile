# The kvlive image for deploy/kvlive: a static binary on distroless.
#   docker build -t REGISTRY/kvlive:TAG .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# grpcnotrace keeps grpc (the OTLP exporter's) from linking x/net/trace,
# whose html/template makes the linker keep every exported method of every
# type: half the binary (docs/performance.md, "Binary size").
RUN CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags="-s -w" -o /kvlive ./cmd/kvlive

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kvlive /kvlive
ENTRYPOINT ["/kvlive"]
