#!/usr/bin/env bash
# Builds the Debian package of zpage from the workspace:
#   TARGET/debian/zpage_VERSION-1_ARCH.deb
# holding exactly what `scripts/install.sh --prefix /usr` installs (the
# command, the preload library, the C library with header and zpage.pc, man
# pages, shell completions, the systemd units and ops/), so the package and
# a source install never differ. dpkg-deb packs it; dpkg-shlibdeps computes
# the library dependencies.
#
# Usage: scripts/build-deb.sh [--no-build]   (--no-build: reuse the release build)
# Needs dpkg-dev (dpkg-shlibdeps). CARGO_TARGET_DIR is honoured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
arch=$(dpkg --print-architecture)
stage="$target/debian/zpage_${version}_${arch}"
deb="$target/debian/zpage_${version}-1_${arch}.deb"

rm -rf "$stage"
bash "$root/scripts/install.sh" --prefix /usr --destdir "$stage" "$@"
gzip -9n "$stage"/usr/share/man/man1/*.1
install -d "$stage/usr/share/doc/zpage"
install -m 0644 "$root/README.md" "$stage/usr/share/doc/zpage/README.md"
printf 'zpage %s\nLicense: %s\n' "$version" \
    "$(sed -n 's/^license = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)" \
    > "$stage/usr/share/doc/zpage/copyright"

# dpkg-shlibdeps reads a debian/control; give it a minimal one of its own.
shlibs=$(mktemp -d)
trap 'rm -rf "$shlibs"' EXIT
mkdir -p "$shlibs/debian"
printf 'Source: zpage\n\nPackage: zpage\nArchitecture: any\n' > "$shlibs/debian/control"
depends=$(cd "$shlibs" && dpkg-shlibdeps -O \
    -e"$stage/usr/bin/zpage" \
    -e"$stage/usr/lib/zpage/libzpage_preload.so" \
    -e"$stage/usr/lib/libzpage.so.$version" 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
    echo "build-deb.sh: dpkg-shlibdeps found no dependencies (is dpkg-dev installed?)" >&2
    exit 1
fi

install -d "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<EOF
Package: zpage
Version: ${version}-1
Architecture: ${arch}
Maintainer: zpage developers <zpage@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: ${depends}
Recommends: pkg-config
Section: admin
Priority: optional
Homepage: $(sed -n 's/^repository = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
Description: memory compression for Linux programs in user space
 zpage runs unmodified programs with a compressed memory budget
 (zpage run), analyses how well memory compresses, configures and
 monitors the kernel's zram and zswap, and exports Prometheus metrics.
 Includes the C library libzpage with its header and pkg-config file.
EOF
# The shared library in /usr/lib: refresh the linker cache on install and removal.
echo "activate-noawait ldconfig" > "$stage/DEBIAN/triggers"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    > "$stage/DEBIAN/md5sums"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
echo "$deb"
