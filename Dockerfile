# Multi-stage build: a static binary on a distroless base, running as a
# non-root user.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/maitred ./cmd/maitred

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/maitred /usr/local/bin/maitred
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/maitred"]
CMD ["serve", "--config", "/etc/maitred/maitred.yaml"]
