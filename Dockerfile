# Build: docker build -t systemone-gateway .
# Run:   docker run -p 8080:8080 systemone-gateway
#        (the root Caddyfile: the gateway on :8080 in front of the built-in
#        simulator; mount your own at /etc/caddy/Caddyfile)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/systemone-gateway ./cmd/systemone-gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/systemone-gateway /usr/bin/systemone-gateway
COPY Caddyfile /etc/caddy/Caddyfile
ENV XDG_CONFIG_HOME=/tmp/config XDG_DATA_HOME=/tmp/data
EXPOSE 8080
ENTRYPOINT ["/usr/bin/systemone-gateway"]
CMD ["run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
