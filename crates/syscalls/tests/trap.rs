//! The seccomp trap on evicted region memory, with the real C library and
//! kernel: the C library's own calls (no wrapper in the way) on buffers in
//! regions whose every page is evicted. Without the trap each of these
//! fails with `EFAULT` (`without_the_trap_the_kernel_fails_the_call` shows
//! it); with it every byte arrives.
//!
//! A filter stays for the life of a process, so each scenario runs in a
//! child process: the test binary runs itself with the scenario's name.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::process::Command;
use zpage_region::{far, Region, RegionConfig};

const MIB: usize = 1 << 20;
const CHILD_ENV: &str = "ZPAGE_TRAP_TEST_SCENARIO";

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Runs the scenario `name` in a child (this binary, that one test).
fn in_child(name: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "scenario", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("SCENARIO PASSED"),
        "scenario {name}: {}\n{stdout}\n{stderr}",
        out.status
    );
}

/// The child's side: runs the scenario named in the environment.
#[test]
fn scenario() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    match name.as_str() {
        "glibc_calls" => glibc_calls(),
        "stdio" => stdio(),
        "no_trap" => no_trap(),
        "big_write" => big_write(),
        "wrapped" => wrapped(),
        "setuid_exec" => setuid_exec(),
        other => panic!("no scenario {other}"),
    }
    println!("SCENARIO PASSED");
}

/// A region of `size` bytes (budget `budget`), filled with the pattern and
/// every page evicted.
fn evicted(size: usize, budget: usize) -> Region {
    let mut region = Region::new(RegionConfig::new(size, budget)).expect("region");
    for (i, b) in region.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    region.advise_cold(0, region.len()).expect("cold");
    region
}

fn evict_all(region: &Region) {
    region.advise_cold(0, region.len()).expect("cold");
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn glibc_calls() {
    assert_eq!(
        zpage_syscalls::trap::install().expect("install"),
        zpage_syscalls::trap::Installed::New
    );
    let region = evicted(4 * MIB, MIB);
    let base = region.as_ptr() as usize;
    assert!(far::contains(base), "regions are placed in the far range");

    // write(2) from evicted memory, read(2) into evicted memory.
    let mut fds = [0i32; 2];
    // SAFETY: a valid two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the region is 4 MiB; 64 KiB fit the pipe's buffer.
    let n = unsafe { libc::write(fds[1], base as *const libc::c_void, 65536) };
    assert_eq!(n, 65536, "write from evicted pages: errno {}", errno());
    evict_all(&region);
    let dst = base + 2 * MIB;
    // SAFETY: 64 KiB inside the region.
    let n = unsafe { libc::read(fds[0], dst as *mut libc::c_void, 65536) };
    assert_eq!(n, 65536, "read into evicted pages: errno {}", errno());
    evict_all(&region);
    let got = &region.as_slice()[2 * MIB..2 * MIB + 65536];
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i)));

    // The C library's calls that fill the caller's structures.
    let cwd = base + 3 * MIB;
    evict_all(&region);
    // SAFETY: 4096 bytes inside the region.
    let p = unsafe { libc::getcwd(cwd as *mut libc::c_char, 4096) };
    assert!(
        !p.is_null(),
        "getcwd into an evicted page: errno {}",
        errno()
    );
    let want = std::env::current_dir().unwrap();
    // SAFETY: getcwd wrote a NUL-terminated path there.
    let got = unsafe { std::ffi::CStr::from_ptr(cwd as *const libc::c_char) };
    assert_eq!(got.to_str().unwrap(), want.to_str().unwrap());

    let uts = base + 3 * MIB + 8192;
    evict_all(&region);
    // SAFETY: a utsname's bytes inside the region.
    let got = unsafe { libc::uname(uts as *mut libc::utsname) };
    assert_eq!(got, 0, "uname: errno {}", errno());

    // A path in evicted memory, a stat buffer in evicted memory.
    let path = CString::new("/proc/self/exe").unwrap();
    let at = base + 3 * MIB + 16384;
    region_write(&region, at, path.as_bytes_with_nul());
    let st = base + 3 * MIB + 20480;
    evict_all(&region);
    // SAFETY: a path and a stat buffer inside the region.
    let r = unsafe { libc::stat(at as *const libc::c_char, st as *mut libc::stat) };
    assert_eq!(
        r,
        0,
        "stat of an evicted path into an evicted buffer: errno {}",
        errno()
    );
    // SAFETY: stat filled it.
    assert!(unsafe { (*(st as *const libc::stat)).st_size } > 0);

    // pipe(2)'s two descriptors into an evicted page.
    let pfds = base + 3 * MIB + 24576;
    evict_all(&region);
    // SAFETY: two ints inside the region.
    let got = unsafe { libc::pipe(pfds as *mut i32) };
    assert_eq!(got, 0, "pipe: errno {}", errno());

    // waitpid(2)'s status into an evicted page: the exit status survives.
    // SAFETY: fork in a test child with no other work; the grandchild exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: exits the forked child at once.
        unsafe { libc::_exit(42) };
    }
    let status = base + 3 * MIB + 28672;
    evict_all(&region);
    // SAFETY: an int inside the region.
    let r = unsafe { libc::waitpid(child, status as *mut i32, 0) };
    assert_eq!(r, child, "waitpid: errno {}", errno());
    // SAFETY: waitpid wrote it.
    let s = unsafe { *(status as *const i32) };
    assert!(
        libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 42,
        "status {s:#x}"
    );

    // writev(2) whose iovec array is on the stack and whose buffers are evicted.
    evict_all(&region);
    let iov = [
        libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: 1000,
        },
        libc::iovec {
            iov_base: (base + 5000) as *mut libc::c_void,
            iov_len: 3000,
        },
    ];
    // SAFETY: two iovecs naming region memory.
    let n = unsafe { libc::writev(fds[1], iov.as_ptr(), 2) };
    assert_eq!(n, 4000, "writev: errno {}", errno());
    let mut back = vec![0u8; 4000];
    // SAFETY: a local buffer.
    let got = unsafe { libc::read(fds[0], back.as_mut_ptr().cast(), 4000) };
    assert_eq!(got, 4000);
    assert!(back[..1000]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i)));
    assert!(back[1000..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(5000 + i)));
}

/// Writes `bytes` into the region at `at` (through the program's own
/// stores: restored by the SIGBUS handler as needed).
fn region_write(region: &Region, at: usize, bytes: &[u8]) {
    let off = at - region.as_ptr() as usize;
    assert!(off + bytes.len() <= region.len());
    // SAFETY: inside the region.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
}

/// stdio's own `write(2)` of a buffer in evicted memory: `fputs` of a
/// string larger than the budget, to a file; every byte arrives.
fn stdio() {
    zpage_syscalls::trap::install().expect("install");
    let size = 24 * MIB;
    let mut region = Region::new(RegionConfig::new(size + MIB, 4 * MIB)).expect("region");
    let text = region.as_mut_slice();
    for (i, b) in text[..size].iter_mut().enumerate() {
        *b = b'a' + (pattern(i) % 26);
    }
    text[size] = 0;
    evict_all(&region);
    let dir = std::env::temp_dir().join(format!("zpage-trap-stdio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out");
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid C strings; the stream is closed below.
    unsafe {
        let f = libc::fopen(cpath.as_ptr(), c"w".as_ptr());
        assert!(!f.is_null());
        let r = libc::fputs(region.as_ptr() as *const libc::c_char, f);
        assert!(r >= 0, "fputs: errno {}", errno());
        assert_eq!(libc::fclose(f), 0, "fclose: errno {}", errno());
    }
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(written.len(), size);
    assert!(written
        .iter()
        .enumerate()
        .all(|(i, &b)| b == b'a' + (pattern(i) % 26)));
}

/// One write(2) of a buffer larger than half the budget: made in pinned
/// pieces, every byte arrives.
fn big_write() {
    zpage_syscalls::trap::install().expect("install");
    let size = 16 * MIB;
    let region = evicted(size, 2 * MIB);
    let dir = std::env::temp_dir().join(format!("zpage-trap-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out");
    let file = std::fs::File::create(&path).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: the whole region.
    let n = unsafe { libc::write(file.as_raw_fd(), region.as_ptr().cast(), size) };
    assert_eq!(n as usize, size, "errno {}", errno());
    drop(file);
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(written.iter().enumerate().all(|(i, &b)| b == pattern(i)));
}

/// Every region of the process is zpage's (the in-process rule).
struct AnyRegion;

impl zpage_syscalls::Policy for AnyRegion {
    type Inside = ();
    fn passes_through(&self) -> bool {
        false
    }
    fn in_region(&self, addr: usize, len: usize) -> bool {
        zpage_region::overlaps_any_region(addr, len)
    }
    fn enter(&self) {}
    const ADVICE: &'static str = "(test)";
}

/// A wrapped call whose buffer the wrapper pinned is made from the
/// trampoline: the filter does not trap it a second time.
fn wrapped() {
    zpage_syscalls::trap::install().expect("install");
    let region = evicted(4 * MIB, MIB);
    let mut fds = [0i32; 2];
    // SAFETY: a valid two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let before = zpage_syscalls::trap::trapped_calls();
    // SAFETY: 4096 bytes of the region, the C library's write.
    let n = unsafe {
        zpage_syscalls::calls::write(
            &AnyRegion,
            Some(libc::write),
            fds[1],
            region.as_ptr().cast(),
            4096,
        )
    };
    assert_eq!(n, 4096, "errno {}", errno());
    assert_eq!(
        zpage_syscalls::trap::trapped_calls(),
        before,
        "trapped again"
    );
    let mut back = vec![0u8; 4096];
    // SAFETY: a local buffer.
    let got = unsafe { libc::read(fds[0], back.as_mut_ptr().cast(), 4096) };
    assert_eq!(got, 4096);
    assert!(back.iter().enumerate().all(|(i, &b)| b == pattern(i)));
    // The same call through the C library alone is trapped.
    evict_all(&region);
    // SAFETY: as above.
    let n = unsafe { libc::write(fds[1], region.as_ptr().cast(), 4096) };
    assert_eq!(n, 4096);
    assert_eq!(zpage_syscalls::trap::trapped_calls(), before + 1);
}

/// As a user other than root, installing the filter sets no_new_privs: a
/// set-user-ID program then runs without its privileges, and an exec the
/// trap serves (its path in region memory) says so on stderr (checked by
/// the parent).
fn setuid_exec() {
    // SAFETY: this test child drops to `nobody` for good.
    unsafe {
        if libc::getuid() == 0 {
            assert_eq!(libc::setgid(65534), 0);
            assert_eq!(libc::setuid(65534), 0);
        }
    }
    zpage_syscalls::trap::install().expect("install as nobody");
    // SAFETY: a plain prctl query.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    assert_eq!(nnp, 1);
    let region = evicted(MIB, MIB);
    let path = region.as_ptr() as usize;
    region_write(&region, path, b"/usr/bin/passwd\0");
    let argv = [c"passwd".as_ptr(), c"--help".as_ptr(), std::ptr::null()];
    // SAFETY: fork in a single-purpose test child; the grandchild execs or
    // exits at once.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: a NUL-terminated path in the region and a NULL-terminated
        // argv.
        unsafe {
            libc::execv(path as *const libc::c_char, argv.as_ptr());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: a local status word.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 127,
        "{status:#x}"
    );
}

/// Without the trap (regions placed in the far range, no filter) the
/// kernel fails the same call: the scenarios above would fail without it.
fn no_trap() {
    far::reserve().expect("reserve");
    let region = evicted(4 * MIB, MIB);
    // SAFETY: 4096 bytes inside the region.
    let p = unsafe { libc::getcwd(region.as_ptr() as *mut libc::c_char, 4096) };
    assert!(
        p.is_null() && errno() == libc::EFAULT,
        "getcwd: {p:?}, errno {}",
        errno()
    );
    assert!(!zpage_syscalls::trap::active());
}

#[test]
fn the_c_librarys_own_calls_work_on_evicted_memory() {
    in_child("glibc_calls");
}

#[test]
fn stdio_writes_a_string_larger_than_the_budget_whole() {
    in_child("stdio");
}

#[test]
fn a_write_larger_than_half_the_budget_goes_in_pieces() {
    in_child("big_write");
}

#[test]
fn a_wrapped_call_is_made_from_the_trampoline_not_trapped_again() {
    in_child("wrapped");
}

#[test]
fn a_set_user_id_program_is_named_when_it_loses_its_privileges() {
    if !std::path::Path::new("/usr/bin/passwd").exists() {
        eprintln!("skipped: /usr/bin/passwd is not installed");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "scenario", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "setuid_exec")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("set-user-ID") && stderr.contains("no_new_privs"),
        "{}\n{stderr}",
        out.status
    );
}

#[test]
fn without_the_trap_the_kernel_fails_the_call() {
    in_child("no_trap");
}
