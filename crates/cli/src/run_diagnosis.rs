//! Why `zpage run`'s user mode may have had no effect, said in the summary
//! instead of a bare "Processes: 0": facts about the program read before it
//! starts (a static binary, or one the kernel runs in secure-execution
//! mode, where the dynamic loader ignores `LD_PRELOAD`), the descriptor
//! limit it inherits, and how it ended; and what a death by SIGBUS most
//! likely means under zpage.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What decides whether the preload library can load into a program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramFacts {
    /// An ELF executable without a dynamic loader (`PT_INTERP`).
    pub statically_linked: bool,
    /// Why the kernel runs it in secure-execution mode (`AT_SECURE`), if it does.
    pub secure_execution: Option<String>,
}

/// Below this many descriptors the preload library may find none free for
/// its userfaultfd, its threads' pipes and its report.
const FEW_DESCRIPTORS: u64 = 16;

impl ProgramFacts {
    /// Reads the facts of the executable at `path` (found on PATH already).
    /// A file that cannot be read, or is not ELF (a script), has none: its
    /// interpreter is what runs, and is judged by its own report.
    pub fn inspect(path: &Path) -> ProgramFacts {
        ProgramFacts {
            statically_linked: statically_linked(path).unwrap_or(false),
            secure_execution: secure_execution(path),
        }
    }
}

/// Whether `path` is an ELF executable without `PT_INTERP`: nothing loads
/// `LD_PRELOAD` libraries into it. Reads the headers only (the first 64 KiB
/// hold the program headers of every executable a linker makes).
fn statically_linked(path: &Path) -> Option<bool> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::io::Read;
    let mut head = Vec::with_capacity(64 << 10);
    std::fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let data = head.as_slice();
    fn has_interpreter<H: FileHeader<Endian = object::Endianness>>(data: &[u8]) -> Option<bool> {
        let header = H::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let headers = header.program_headers(endian, data).ok()?;
        Some(
            headers
                .iter()
                .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP),
        )
    }
    let interpreter = match object::FileKind::parse(data).ok()? {
        object::FileKind::Elf64 => {
            has_interpreter::<object::elf::FileHeader64<object::Endianness>>(data)?
        }
        object::FileKind::Elf32 => {
            has_interpreter::<object::elf::FileHeader32<object::Endianness>>(data)?
        }
        _ => return None,
    };
    Some(!interpreter)
}

/// Why running `path` gives the kernel's secure-execution mode: a
/// set-user-ID or set-group-ID bit that changes our ids (on a file system
/// mounted without `nosuid`), or file capabilities for a user who is not
/// root.
fn secure_execution(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if nosuid_mount(path) {
        return None;
    }
    let (uid, gid) = real_ids();
    if meta.mode() & libc::S_ISUID != 0 && meta.uid() != uid {
        return Some(format!("set-user-ID (owner uid {})", meta.uid()));
    }
    if meta.mode() & libc::S_ISGID != 0 && meta.gid() != gid {
        return Some(format!("set-group-ID (group gid {})", meta.gid()));
    }
    if uid != 0 && has_file_capabilities(path) {
        return Some("given file capabilities (setcap)".into());
    }
    None
}

fn real_ids() -> (u32, u32) {
    // SAFETY: getuid and getgid take no arguments and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

fn nosuid_mount(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
    else {
        return false;
    };
    // SAFETY: a zeroed statvfs is a valid out value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `stat` a live local, both outliving the call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut stat) };
    rc == 0 && stat.f_flag & libc::ST_NOSUID != 0
}

fn has_file_capabilities(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
    else {
        return false;
    };
    // SAFETY: both strings are NUL-terminated and live across the call; a
    // null buffer of size 0 only asks for the attribute's size.
    let size = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    size > 0
}

/// This process's soft limit on open descriptors, which the program inherits.
pub fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live local the call fills in.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A signal's name, `SIGTERM`; `signal N` for one without.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(signal).ok().and_then(|s| NAMES.get(s)) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal) => {
            format!("SIGRTMIN+{}", signal - libc::SIGRTMIN())
        }
        _ => format!("signal {signal}"),
    }
}

/// Why no process of the run wrote a report, most specific cause first.
/// `program` is the executable as found on PATH; `killed_by` the signal
/// that ended the program, if one did; `descriptors` the limit it
/// inherited.
pub fn why_no_report(
    program: &Path,
    facts: &ProgramFacts,
    killed_by: Option<i32>,
    descriptors: Option<u64>,
) -> String {
    let shown = program.display();
    if facts.statically_linked {
        return format!(
            "{shown} is statically linked, and the preload library (LD_PRELOAD) cannot load into a program without the dynamic loader: it ran without zpage; use --mode kernel (root) or a dynamically linked build"
        );
    }
    if let Some(why) = &facts.secure_execution {
        return format!(
            "{shown} is {why}, so the kernel runs it in secure-execution mode, where the dynamic loader ignores LD_PRELOAD: it ran without zpage; use --mode kernel (root), or run it as the user it runs as"
        );
    }
    if let Some(signal) = killed_by {
        return format!(
            "the program was killed by {} before it could write its report (reports are written at exit)",
            signal_name(signal)
        );
    }
    if let Some(limit) = descriptors.filter(|&n| n < FEW_DESCRIPTORS) {
        return format!(
            "RLIMIT_NOFILE is {limit}: with (almost) no descriptor free, the preload library could set up neither its userfaultfd nor its report; raise it (ulimit -n 1024)"
        );
    }
    "either the preload library did not load (the program clears LD_PRELOAD, or hands its work to a static or set-user-ID program it starts), or it could not write its report (no descriptor free: a RLIMIT_NOFILE lowered inside the program, as by prlimit --nofile; or the program ended with _exit(2), which skips exit handlers)".into()
}

/// What a death by SIGBUS most likely means under user mode, and what to do.
pub const SIGBUS_NOTE: &str = "killed by SIGBUS: under zpage this most often means a thread touched a compressed page while SIGBUS was blocked. zpage brings pages back in its SIGBUS handler, and the kernel kills a process whose fault signal is blocked. The C library's sigprocmask and pthread_sigmask are kept from blocking SIGBUS under zpage, but a raw rt_sigprocmask system call (or a thread started with every signal blocked that way) is not. If the program does not die so without zpage: unblock SIGBUS around memory accesses, keep that memory out of regions (a larger --min-mapping or --budget), or use --mode kernel";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_programs_and_scripts_are_not_static() {
        assert_eq!(statically_linked(Path::new("/bin/sh")), Some(false));
        // Not ELF: nothing is claimed.
        let script = std::env::temp_dir().join(format!("zpage-diag-{}.sh", std::process::id()));
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(statically_linked(&script), None);
        std::fs::remove_file(&script).unwrap();
        assert_eq!(
            ProgramFacts::inspect(Path::new("/bin/sh")),
            ProgramFacts::default()
        );
    }

    #[test]
    fn the_most_specific_cause_is_given() {
        let p = Path::new("/x/prog");
        let static_facts = ProgramFacts {
            statically_linked: true,
            secure_execution: None,
        };
        assert!(why_no_report(p, &static_facts, None, None).contains("statically linked"));
        let setuid = ProgramFacts {
            statically_linked: false,
            secure_execution: Some("set-user-ID (owner uid 0)".into()),
        };
        assert!(why_no_report(p, &setuid, None, None).contains("ignores LD_PRELOAD"));
        let plain = ProgramFacts::default();
        assert!(why_no_report(p, &plain, Some(9), None).contains("SIGKILL"));
        assert!(why_no_report(p, &plain, None, Some(3)).contains("RLIMIT_NOFILE is 3"));
        assert!(why_no_report(p, &plain, None, Some(1024)).contains("_exit"));
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
    }
}
