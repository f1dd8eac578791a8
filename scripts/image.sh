#!/usr/bin/env bash
# Builds floodgate's container image with podman from the repo's Dockerfile.
#   scripts/image.sh [build]   make the two base images when missing, then build the image
#   scripts/image.sh bases     only make the base images when missing
#   scripts/image.sh clean     remove the image, the bases, and the build's cargo caches
# The image is tagged $FLOODGATE_IMAGE (default localhost/floodgate:dev).
#
# No container registry is reachable on the machines this project's CI runs on, so the bases
# the Dockerfile pins (its BUILDER and RUNTIME arguments) are made here, under the same names,
# from Debian's own packages (mmdebstrap) and the machine's Rust toolchain:
# - BUILDER (rust:<version>-bookworm): Debian 12 with gcc/g++, make, pkg-config, libssl-dev,
#   zlib1g-dev and CA certificates, and the machine's rustc/cargo of exactly that version under
#   /usr/local/rustup, on PATH through /usr/local/cargo/bin, as the official image lays it out.
#   It also trusts the CAs the machine added to its own store (/usr/local/share/ca-certificates):
#   where HTTPS leaves through a TLS-inspecting proxy, cargo in the build stage reaches
#   crates.io only with that proxy's CA;
# - RUNTIME (distroless cc-debian12:nonroot): only the files of base-files, netbase, tzdata,
#   ca-certificates (the bundle made from them), libc6, libssl3, libgcc-s1, libgomp1,
#   libstdc++6, with root, nobody and nonroot (65532) users, as distroless makes it.
# On a machine that can pull them, the real images are used instead (they are found first).
set -euo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/containers.conf}
IMAGE=${FLOODGATE_IMAGE:-localhost/floodgate:dev}
SUITE=bookworm

# The pins are the Dockerfile's: one place says which bases the image is built on.
arg_default() {
  sed -n "s/^ARG $1=//p" Dockerfile
}
BUILDER=$(arg_default BUILDER)
RUNTIME=$(arg_default RUNTIME)

have() {
  podman image exists "$1"
}

# docs, man pages and translations are left out of both bases, as Debian's slim images do.
SLIM=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*'
)

make_runtime() {
  local work=$1
  echo "making $RUNTIME from Debian's packages"
  # `extract` unpacks the packages without running their scripts (the image has no shell to
  # run them); the hook does what they would have: the CA bundle, users, /tmp, ld.so.cache.
  mmdebstrap --quiet --variant=extract "${SLIM[@]}" \
    --include=base-files,netbase,tzdata,ca-certificates,libc6,libssl3,libgcc-s1,libgomp1,libstdc++6,gcc-12-base \
    --customize-hook='set -e
      cat "$1"/usr/share/ca-certificates/mozilla/*.crt > "$1/etc/ssl/certs/ca-certificates.crt"
      printf "%s\n" "root:x:0:0:root:/root:/sbin/nologin" \
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin" \
        "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" > "$1/etc/passwd"
      printf "%s\n" "root:x:0:" "nobody:x:65534:" "nonroot:x:65532:" > "$1/etc/group"
      printf "%s\n" "hosts: files dns" > "$1/etc/nsswitch.conf"
      mkdir -p "$1/tmp" "$1/home/nonroot"
      chmod 1777 "$1/tmp"
      chown 65532:65532 "$1/home/nonroot"
      chmod 700 "$1/home/nonroot"
      rm -rf "$1/etc/apt" "$1/var/cache/apt" "$1/var/lib/apt" "$1/var/cache/debconf" \
        "$1/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
      ldconfig -r "$1"' \
    "$SUITE" "$work/runtime.tar"
  podman import --quiet \
    --change 'USER 65532:65532' \
    --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    "$work/runtime.tar" "$RUNTIME" >/dev/null
  rm -f "$work/runtime.tar"
}

make_builder() {
  local work=$1 version sysroot triple
  version=$(sed -n 's/.*rust:\([0-9][0-9.]*\)-.*/\1/p' <<<"$BUILDER")
  if [ -z "$version" ]; then
    echo "cannot read the Rust version from BUILDER=$BUILDER" >&2
    return 1
  fi
  # The toolchain of exactly the pinned version (rustup's, when the machine has several).
  if command -v rustup >/dev/null && rustup run "$version" rustc --version >/dev/null 2>&1; then
    sysroot=$(rustup run "$version" rustc --print sysroot)
  else
    sysroot=$(rustc --print sysroot)
  fi
  if ! "$sysroot/bin/rustc" --version | grep -q "^rustc $version "; then
    echo "the Dockerfile pins Rust $version; this machine has $("$sysroot/bin/rustc" --version)" >&2
    echo "(rustup toolchain install $version, or change BUILDER in the Dockerfile)" >&2
    return 1
  fi
  triple=$("$sysroot/bin/rustc" -vV | sed -n 's/^host: //p')
  echo "making $BUILDER from Debian's packages and $sysroot"
  export FLOODGATE_SYSROOT=$sysroot FLOODGATE_TOOLCHAIN="$version-$triple"
  # The toolchain without its documentation (800 MB of HTML), at the official image's paths.
  mmdebstrap --quiet --variant=minbase "${SLIM[@]}" \
    --aptopt='APT::Install-Recommends "false"' \
    --include=ca-certificates,gcc,g++,make,libc6-dev,pkg-config,libssl-dev,zlib1g-dev \
    --customize-hook='set -e
      dest="$1/usr/local/rustup/toolchains/$FLOODGATE_TOOLCHAIN"
      mkdir -p "$dest" "$1/usr/local/cargo/bin"
      tar -C "$FLOODGATE_SYSROOT" --exclude=./share/doc -cf - . | tar -C "$dest" -xf -
      for tool in cargo rustc rustdoc; do
        ln -s "../../rustup/toolchains/$FLOODGATE_TOOLCHAIN/bin/$tool" "$1/usr/local/cargo/bin/$tool"
      done
      if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
        cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
        chroot "$1" update-ca-certificates >/dev/null
      fi
      rm -rf "$1/var/lib/apt/lists"/*' \
    "$SUITE" "$work/builder.tar"
  podman import --quiet \
    --change 'ENV RUSTUP_HOME=/usr/local/rustup' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV RUST_VERSION=$version" \
    "$work/builder.tar" "$BUILDER" >/dev/null
  rm -f "$work/builder.tar"
}

bases() {
  if have "$BUILDER" && have "$RUNTIME"; then
    return
  fi
  for tool in podman mmdebstrap; do
    if ! command -v "$tool" >/dev/null; then
      echo "$tool is missing: apt-get install -y podman buildah runc mmdebstrap uidmap" >&2
      exit 1
    fi
  done
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/floodgate-bases.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  have "$RUNTIME" || make_runtime "$work"
  have "$BUILDER" || make_builder "$work"
}

build() {
  bases
  local started=$SECONDS iid size previous
  previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
  iid=$(mktemp "${TMPDIR:-/tmp}/floodgate-iid.XXXXXX")
  trap 'rm -f "$iid"' RETURN
  # The image id is written only by a build that completed (podman build interrupted by a
  # signal can exit 0).
  # --layers=false: no intermediate images are kept (the build stage's work is kept in its
  # cache mounts instead), so repeated builds leave nothing behind but the image.
  podman build --pull=never --layers=false --iidfile "$iid" -t "$IMAGE" .
  if ! [ -s "$iid" ]; then
    echo "podman build did not complete" >&2
    exit 1
  fi
  # The image this tag named before is removed (unless a container still uses it).
  if [ -n "$previous" ] && [ "$previous" != "$(cat "$iid")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
  size=$(podman image inspect --format '{{.Size}}' "$(cat "$iid")")
  echo "built $IMAGE in $((SECONDS - started)) s: $((size / 1000000)) MB"
}

clean() {
  podman rmi --ignore "$IMAGE" "$BUILDER" "$RUNTIME" >/dev/null
  podman image prune --force >/dev/null
  # The build's cache mounts (cargo's registry and target folder).
  buildah prune --force >/dev/null 2>&1 || true
}

case "${1:-build}" in
  build) build ;;
  bases) bases ;;
  clean) clean ;;
  *)
    echo "usage: scripts/image.sh [build|bases|clean]" >&2
    exit 2
    ;;
esac
