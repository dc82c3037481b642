#!/usr/bin/env bash
# baton's container image, from Debian packages alone (no image registry is needed: none is
# reachable from the machines baton is built on). Two stages, each a Debian rootfs made by
# debootstrap and turned into a buildah container:
#   1. builder: Debian with gcc, pkg-config and libopus-dev. baton is compiled there (release),
#      with the host's Rust toolchain mounted read-only (Debian's rustc predates edition 2024),
#      so the binary links the glibc and libopus of the Debian the runtime stage is made of;
#   2. runtime: no distribution, only the files of the Debian packages that own what `ldd` lists
#      for the (stripped) binary — found with `dpkg -S` in the builder, fetched with
#      `apt-get download`, unpacked with `dpkg-deb -x` — plus the builder's CA bundle (wss://
#      model endpoints), the binary, deploy/baton.toml as /etc/baton/baton.toml and user baton
#      (10001). No shell, no package manager.
#
#   deploy/container/build.sh                 # → localhost/baton:<version> (root or rootless)
#   podman run --rm -p 8080:8080 -e BATON_API_TOKENS=… -e BATON_STORE_URL=… \
#       -e GEMINI_API_KEY=… localhost/baton:0.1.0
#   podman save -o out/baton.tar localhost/baton:0.1.0   # to load on another machine
#
# Run by hand (a few minutes and a release build), not in CI. Needs debootstrap and buildah
# (apt-get install debootstrap buildah podman); SUITE and MIRROR choose the Debian. Where podman
# cannot run containers (no cgroup controllers), try the image with buildah:
#   c=$(buildah from localhost/baton:0.1.0); buildah run --isolation chroot --user 10001 "$c" -- \
#       /usr/local/bin/baton --version
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

# A buildah container holding the rootfs in $1 (the caller records it for the cleanup: this
# runs in a subshell).
from_rootfs() {
  local c
  c=$(buildah from scratch)
  buildah copy --quiet "$c" "$1" / >/dev/null
  echo "$c"
}

echo "build.sh: builder rootfs (debootstrap $suite)" >&2
debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev,pkg-config,libopus-dev \
  "$suite" "$work/builder" "$mirror" >"$work/builder.log" 2>&1 || { tail -20 "$work/builder.log" >&2; exit 1; }
builder=$(from_rootfs "$work/builder")
containers+=("$builder")

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
buildah run --isolation chroot --volume "$PWD:/src" "$builder" -- \
  strip -o /src/target/container/baton /src/$binary
# The Debian packages that own the binary's libraries (with a merged /usr, ldd may name a file
# by either of its paths).
pkgs=$(buildah run --isolation chroot --volume "$PWD:/src" "$builder" -- sh -c '
  owner() { for p in "$1" "${1#/usr}" "/usr$1"; do dpkg -S "$p" 2>/dev/null && return; done; echo "no package owns $1" >&2; exit 1; }
  for lib in $(ldd /src/target/container/baton | awk "/=> \\// {print \$3} /^\t\\// {print \$1}"); do owner "$lib"; done \
    | cut -d: -f1 | sort -u | tr "\n" " "')
echo "build.sh: runtime packages: $pkgs" >&2

echo "build.sh: runtime rootfs (those packages' files only)" >&2
mkdir -p "$work/debs" "$work/runtime"
chmod 0755 "$work/runtime"   # it becomes /: everyone must enter it
buildah run --isolation chroot --volume "$work/debs:/debs" "$builder" -- \
  sh -c "apt-get update -qq && cd /debs && apt-get download -qq $pkgs" >"$work/download.log" 2>&1 \
  || { tail -20 "$work/download.log" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/runtime"; done
rm -rf "$work"/runtime/usr/share/{doc,man,info,locale,lintian} \
  "$work"/runtime/usr/lib/x86_64-linux-gnu/gconv "$work"/runtime/usr/lib/*/gconv
r=$work/runtime
install -d -m 0755 "$r/etc/ssl/certs" "$r/usr/local/bin" "$r/etc/baton"
install -d -m 1777 "$r/tmp"
install -d -m 0755 "$r/var/lib"
mkdir -p "$work/home"   # /var/lib/baton, copied below as the user's own
buildah run --isolation chroot --volume "$r:/runtime" "$builder" -- \
  cp /etc/ssl/certs/ca-certificates.crt /runtime/etc/ssl/certs/ca-certificates.crt
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nbaton:x:10001:10001:baton:/var/lib/baton:/usr/sbin/nologin\n' >"$r/etc/passwd"
printf 'root:x:0:\nbaton:x:10001:\n' >"$r/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$r/etc/nsswitch.conf"
install -m 0755 target/container/baton "$r/usr/local/bin/baton"
install -m 0644 deploy/baton.toml "$r/etc/baton/baton.toml"

runtime=$(buildah from scratch)
containers+=("$runtime")
buildah copy --quiet "$runtime" "$r" / >/dev/null
# buildah copy makes everything root's; the working folder must be the user's.
buildah copy --quiet --chown 10001:10001 "$runtime" "$work/home" /var/lib/baton >/dev/null
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
