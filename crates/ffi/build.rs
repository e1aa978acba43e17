//! Gives libzpage.so a SONAME, so programs linked against it record
//! `libzpage.so.0` and keep working across compatible upgrades (install.sh
//! installs the file under its full version with the usual links).
fn main() {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libzpage.so.{major}");
}
