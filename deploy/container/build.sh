#!/usr/bin/env bash
# baton's container image, from Debian packages alone (no image registry is needed: none is
# reachable from the machines baton is built on). Two stages, each a Debian rootfs made by
# debootstrap and turned into a buildah container:
#   1. builder: Debian with gcc, pkg-config and libopus-dev. baton is compiled there (release),
#      with the host's Rust toolchain mounted read-only (Debian's rustc predates edition 2024),
#      so the binary links the glibc and libopus of the Debian the runtime stage is made of;
#   2. runtime: minimal Debian with the binary's runtime libraries only (the packages that own
#      what `ldd` lists, found with `dpkg -S` in the builder) and ca-certificates (wss:// model
#      endpoints); the binary, deploy/baton.toml as /etc/baton/baton.toml, user baton (10001).
#
#   deploy/container/build.sh                 # → localhost/baton:<version> (root or rootless)
#   podman run --rm -p 8080:8080 -e BATON_API_TOKENS=… -e BATON_STORE_URL=… \
#       -e GEMINI_API_KEY=… localhost/baton:0.1.0
#   podman save -o out/baton.tar localhost/baton:0.1.0   # to load on another machine
#
# Run by hand (a few minutes and a release build), not in CI. Needs debootstrap and buildah
# (apt-get install debootstrap buildah podman); SUITE and MIRROR choose the Debian.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
image=${IMAGE:-localhost/baton:$version}
for tool in debootstrap buildah; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install debootstrap buildah podman)" >&2; exit 1; }
done
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
[ -d "$rustup_home/toolchains" ] || { echo "build.sh: no Rust toolchain in $rustup_home (install rustup)" >&2; exit 1; }
toolchain=$(rustup show active-toolchain | cut -d' ' -f1)

work=$(mktemp -d)
containers=()
cleanup() {
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A buildah container holding the rootfs in $1.
from_rootfs() {
  local c
  c=$(buildah from scratch)
  containers+=("$c")
  buildah copy --quiet "$c" "$1" / >/dev/null
  echo "$c"
}

echo "build.sh: builder rootfs (debootstrap $suite)" >&2
debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev,pkg-config,libopus-dev \
  "$suite" "$work/builder" "$mirror" >"$work/builder.log" 2>&1 || { tail -20 "$work/builder.log" >&2; exit 1; }
builder=$(from_rootfs "$work/builder")

echo "build.sh: cargo build --release in the builder" >&2
buildah run --isolation chroot \
  --volume "$PWD:/src" \
  --volume "$rustup_home:/opt/rustup:ro" \
  --volume "$cargo_home/registry:/opt/cargo/registry" \
  --env RUSTUP_HOME=/opt/rustup --env CARGO_HOME=/opt/cargo \
  --env "RUSTUP_TOOLCHAIN=$toolchain" \
  --env PATH="/opt/rustup/toolchains/$toolchain/bin:/usr/bin:/bin" \
  "$builder" -- sh -c 'cd /src && cargo build --release --locked --bin baton --target-dir /src/target/container'
binary=target/container/release/baton
libs=$(buildah run --isolation chroot --volume "$PWD:/src" "$builder" -- \
  sh -c "ldd /src/$binary | awk '/=> \\// {print \$3}' | xargs -r readlink -f | xargs -r dpkg -S | cut -d: -f1 | sort -u | tr '\n' ' '")
echo "build.sh: runtime packages: $libs" >&2

echo "build.sh: runtime rootfs" >&2
debootstrap --variant=minbase --include="ca-certificates,${libs// /,}" \
  "$suite" "$work/runtime" "$mirror" >"$work/runtime.log" 2>&1 || { tail -20 "$work/runtime.log" >&2; exit 1; }
rm -rf "$work"/runtime/var/cache/apt/* "$work"/runtime/var/lib/apt/lists/* \
  "$work"/runtime/usr/share/{doc,man,info,locale} "$work"/runtime/var/log/*
echo "baton:x:10001:10001:baton:/var/lib/baton:/usr/sbin/nologin" >>"$work/runtime/etc/passwd"
echo "baton:x:10001:" >>"$work/runtime/etc/group"
install -d -o 10001 -g 10001 "$work/runtime/var/lib/baton"
install -D -m 0755 "$binary" "$work/runtime/usr/local/bin/baton"
install -D -m 0644 deploy/baton.toml "$work/runtime/etc/baton/baton.toml"

runtime=$(buildah from scratch)
containers+=("$runtime")
buildah copy --quiet "$runtime" "$work/runtime" / >/dev/null
buildah config \
  --user 10001:10001 \
  --workingdir /var/lib/baton \
  --port 8080/tcp \
  --stop-signal SIGTERM \
  --entrypoint '["/usr/local/bin/baton"]' \
  --cmd 'serve --config /etc/baton/baton.toml' \
  --label org.opencontainers.image.title=baton \
  --label "org.opencontainers.image.version=$version" \
  "$runtime"
buildah commit --quiet --rm "$runtime" "$image" >/dev/null
containers=("${containers[@]/$runtime}")
echo "build.sh: $image" >&2
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$image"
