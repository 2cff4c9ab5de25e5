#!/usr/bin/env bash
# Builds a Redis image with no registry: Debian's redis-server binary and
# the shared libraries ldd lists for it, in a FROM scratch image.
#
#   integration/image/build.sh [IMAGE]      (default quorumlock/redis:local)
#
# Needs redis-server installed (apt-get install -y redis-server) and a
# Docker engine. Rebuilds only when the binary changed.
set -euo pipefail
image="${1:-quorumlock/redis:local}"
bin="$(command -v redis-server || true)"
if [ -z "$bin" ]; then
  echo "build.sh: redis-server is not installed: apt-get install -y redis-server" >&2
  exit 1
fi
src="$bin"
bin="$(readlink -f "$bin")" # Debian links redis-server to the redis-check-rdb binary
sum="$(sha256sum "$bin" | cut -c1-16)"
if [ "$(docker image inspect -f '{{index .Config.Labels "org.quorumlock.redis-sha"}}' "$image" 2>/dev/null || true)" = "$sum" ]; then
  echo "build.sh: $image is up to date"
  exit 0
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root/usr/local/bin" "$root/data" "$root/tmp"
chmod 1777 "$root/tmp"
chmod 0777 "$root/data"
cp -L "$bin" "$root/usr/local/bin/redis-server"
# Every library the binary loads, and the dynamic loader itself, at the
# paths where the loader looks for them.
ldd "$bin" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\// {print $1}' | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /data
EXPOSE 6379
LABEL org.quorumlock.redis-sha="$sum"
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no"]
DOCKERFILE
docker build -q -t "$image" "$ctx" >/dev/null
echo "build.sh: built $image from $src ($(du -sh "$root" | cut -f1))"
