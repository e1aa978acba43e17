#!/bin/sh
# Installs zpage's C API into a prefix:
#   PREFIX/include/zpage.h,
#   PREFIX/lib/libzpage.so.VERSION (SONAME libzpage.so.MAJOR) with the links
#   libzpage.so.MAJOR and libzpage.so, PREFIX/lib/libzpage.a,
#   PREFIX/lib/pkgconfig/zpage.pc
# Usage: crates/ffi/install.sh PREFIX [BUILD_DIR]
#   BUILD_DIR holds libzpage.so and libzpage.a (default: target/release, after
#   `cargo build --release -p zpage-ffi`).
#   DESTDIR (environment) stages the files under DESTDIR/PREFIX while zpage.pc
#   names PREFIX, as packagers expect (scripts/install.sh, scripts/build-deb.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${1:?usage: install.sh PREFIX [BUILD_DIR]}
build_dir=${2:-${CARGO_TARGET_DIR:-$root/target}/release}
dest=${DESTDIR:-}$prefix
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)

major=${version%%.*}

mkdir -p "$dest/include" "$dest/lib/pkgconfig"
cp "$root/include/zpage.h" "$dest/include/zpage.h"
for lib in libzpage.so libzpage.a; do
    if [ ! -f "$build_dir/$lib" ]; then
        echo "install.sh: $build_dir/$lib not found (build zpage-ffi first)" >&2
        exit 1
    fi
done
cp "$build_dir/libzpage.so" "$dest/lib/libzpage.so.$version"
ln -sf "libzpage.so.$version" "$dest/lib/libzpage.so.$major"
ln -sf "libzpage.so.$major" "$dest/lib/libzpage.so"
cp "$build_dir/libzpage.a" "$dest/lib/libzpage.a"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$here/zpage.pc.in" > "$dest/lib/pkgconfig/zpage.pc"
echo "installed zpage $version C API into $dest"
