//! Programs started with `posix_spawn`, `system` and `popen`.
//!
//! The C library starts these in a child that shares the parent's memory
//! (`CLONE_VFORK`) and, before its `exec`, resets every signal handler to
//! the default: zpage's SIGBUS and SIGSYS handlers are gone there. Region
//! memory the child reaches would then kill it: an evicted page it reads
//! (SIGBUS), a pointer into the far range it hands the kernel (the
//! system-call trap's SIGSYS). So what the child uses is copied outside
//! the range first, into zpage's private heap: the program path, `argv` and
//! `envp` (arrays and strings), the attributes, and the file actions' own
//! memory (made by the C library's `posix_spawn_file_actions_add*`, whose
//! allocations are served from the private heap); `system`'s and `popen`'s
//! command. The child then runs on memory zpage never evicts, and its
//! `exec` is never trapped.
//!
//! Not covered: `system` and `popen` pass the program's `environ` as it
//! is; it lies outside regions while it is smaller than the size threshold
//! of `malloc` allocations placed in regions.
#![allow(unsafe_code)]

use crate::alloc;
use crate::real;
use crate::sys;
use libc::{c_char, c_int};

/// Copies a NULL-terminated array of C strings into one private block:
/// the array, then the strings. Null stays null.
///
/// # Safety
/// `v` is null or a valid NULL-terminated array of C strings.
unsafe fn copy_vector(v: *const *const c_char) -> *mut *const c_char {
    if v.is_null() {
        return std::ptr::null_mut();
    }
    let mut n = 0;
    let mut bytes = 0;
    // SAFETY: the caller's contract; reading may fault evicted pages in
    // (zpage's handlers are installed in the parent).
    unsafe {
        while !(*v.add(n)).is_null() {
            bytes += libc::strlen(*v.add(n)) + 1;
            n += 1;
        }
    }
    let table = (n + 1) * std::mem::size_of::<*const c_char>();
    let block = alloc::c_malloc(table + bytes, 16);
    if block.is_null() {
        return std::ptr::null_mut();
    }
    let out = block.cast::<*const c_char>();
    // SAFETY: `block` holds `table + bytes`; the strings are copied after
    // the table, each with its NUL.
    unsafe {
        let mut at = block.add(table);
        for i in 0..n {
            let s = *v.add(i);
            let len = libc::strlen(s) + 1;
            std::ptr::copy_nonoverlapping(s.cast::<u8>(), at, len);
            *out.add(i) = at.cast();
            at = at.add(len);
        }
        *out.add(n) = std::ptr::null();
    }
    out
}

/// Copies one C string into the private heap (null stays null).
///
/// # Safety
/// `s` is null or a valid C string.
unsafe fn copy_string(s: *const c_char) -> *mut c_char {
    if s.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    let len = unsafe { libc::strlen(s) } + 1;
    let p = alloc::c_malloc(len, 1);
    if !p.is_null() {
        // SAFETY: `p` holds `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(s.cast::<u8>(), p, len) };
    }
    p.cast()
}

/// Frees what [`copy_vector`] or [`copy_string`] made.
///
/// # Safety
/// `p` is null or a block they returned.
unsafe fn release<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: a block of the private heap.
        unsafe { alloc::c_free(p.cast()) };
    }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// Says whether the program `name` will run without its set-user-ID
/// privileges (see `zpage_syscalls::trap::warn_if_privileged`); `search`:
/// a name without a `/` is looked up in `PATH`, as `execvp` does.
///
/// # Safety
/// `name` is a valid C string.
unsafe fn check_privileges(name: *const c_char, search: bool) {
    if !zpage_syscalls::trap::installed() || name.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let name_bytes = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    if !search || name_bytes.contains(&b'/') {
        zpage_syscalls::trap::warn_if_privileged(libc::AT_FDCWD, name, 0);
        return;
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let mut candidate = dir.into_os_string().into_encoded_bytes();
        candidate.push(b'/');
        candidate.extend_from_slice(name_bytes);
        let Ok(c) = std::ffi::CString::new(candidate) else {
            continue;
        };
        // SAFETY: a valid C string.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
            zpage_syscalls::trap::warn_if_privileged(libc::AT_FDCWD, c.as_ptr(), 0);
            return;
        }
    }
}

/// `posix_spawn` or `posix_spawnp` with its child's memory copied outside
/// region memory.
///
/// # Safety
/// `posix_spawn(3)`'s contract.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn_with_copies(
    real: Option<SpawnFn>,
    search: bool,
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let Some(real) = real else {
        return libc::ENOSYS;
    };
    if crate::state::get().is_none() || sys::inside() {
        // SAFETY: the caller's arguments.
        return unsafe { real(pid, path, actions, attr, argv, envp) };
    }
    // SAFETY: a valid C string, per the contract.
    unsafe { check_privileges(path, search) };
    // SAFETY: the caller passes valid strings and arrays; each copy is
    // released once the child has run its exec (the parent waits for it).
    unsafe {
        let path_copy = copy_string(path);
        let argv_copy = copy_vector(argv.cast());
        let envp_copy = copy_vector(envp.cast());
        let attr_copy: Option<libc::posix_spawnattr_t> = (!attr.is_null()).then(|| *attr);
        let attr_ptr = attr_copy
            .as_ref()
            .map_or(std::ptr::null(), |a| a as *const libc::posix_spawnattr_t);
        let r = real(
            pid,
            path_copy,
            actions,
            attr_ptr,
            argv_copy.cast(),
            envp_copy.cast(),
        );
        release(path_copy);
        release(argv_copy);
        release(envp_copy);
        r
    }
}

/// # Safety
/// `posix_spawn(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        spawn_with_copies(
            real::posix_spawn(),
            false,
            pid,
            path,
            actions,
            attr,
            argv,
            envp,
        )
    }
}

/// # Safety
/// `posix_spawnp(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        spawn_with_copies(
            real::posix_spawnp(),
            true,
            pid,
            file,
            actions,
            attr,
            argv,
            envp,
        )
    }
}

/// Runs `f` with the thread's C-library allocations served from the private
/// heap (the file actions' memory, which the spawn child reads).
fn privately<T>(f: impl FnOnce() -> T) -> T {
    let _scope = alloc::PrivateScope::enter();
    f()
}

macro_rules! file_actions_privately {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        $(
            /// # Safety
            /// The C library's contract for this function.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                match real::$name() {
                    // SAFETY: the C library's function with the caller's
                    // arguments; its allocations go to the private heap.
                    Some(f) => privately(|| unsafe { f($($arg),*) }),
                    None => libc::ENOSYS,
                }
            }
        )*
    };
}

file_actions_privately! {
    posix_spawn_file_actions_init(a: *mut libc::posix_spawn_file_actions_t);
    posix_spawn_file_actions_addopen(a: *mut libc::posix_spawn_file_actions_t, fd: c_int, path: *const c_char, oflag: c_int, mode: libc::mode_t);
    posix_spawn_file_actions_addclose(a: *mut libc::posix_spawn_file_actions_t, fd: c_int);
    posix_spawn_file_actions_adddup2(a: *mut libc::posix_spawn_file_actions_t, fd: c_int, newfd: c_int);
    posix_spawn_file_actions_addchdir_np(a: *mut libc::posix_spawn_file_actions_t, path: *const c_char);
    posix_spawn_file_actions_addfchdir_np(a: *mut libc::posix_spawn_file_actions_t, fd: c_int);
    posix_spawn_file_actions_addclosefrom_np(a: *mut libc::posix_spawn_file_actions_t, from: c_int);
}

macro_rules! exec_checked {
    ($( $name:ident ( $path:ident : $pty:ty $(, $arg:ident : $ty:ty)* ) search $search:expr; )*) => {
        $(
            /// # Safety
            /// The C library's contract for this function.
            #[no_mangle]
            pub unsafe extern "C" fn $name($path: $pty $(, $arg: $ty)*) -> c_int {
                // SAFETY: a valid C string, per the contract.
                unsafe { check_privileges($path, $search) };
                match real::$name() {
                    // SAFETY: the C library's function with the caller's arguments.
                    Some(f) => unsafe { f($path $(, $arg)*) },
                    None => {
                        sys::set_errno(libc::ENOSYS);
                        -1
                    }
                }
            }
        )*
    };
}

exec_checked! {
    execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) search false;
    execv(path: *const c_char, argv: *const *const c_char) search false;
    execvp(file: *const c_char, argv: *const *const c_char) search true;
    execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) search true;
}

/// # Safety
/// `system(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let Some(real) = real::system() else {
        return -1;
    };
    // SAFETY: a valid C string (or null, which asks whether a shell exists).
    unsafe {
        let copy = copy_string(command);
        let r = real(if command.is_null() { command } else { copy });
        release(copy);
        r
    }
}

/// # Safety
/// `popen(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let Some(real) = real::popen() else {
        sys::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: valid C strings; the copies outlive the child's exec (popen
    // returns after it).
    unsafe {
        let (c, m) = (copy_string(command), copy_string(mode));
        let r = privately(|| real(c, m));
        release(c);
        release(m);
        r
    }
}
