//! Running one program under a supervisor, as `env`, `timeout` and `tini`
//! do, for both modes of `zpage run`: finding the program the way `execvp`
//! does (so a missing program is told apart from one that cannot be run:
//! exit statuses 127 and 126), passing every signal a supervisor is sent on
//! to the program ([`hold_signals`], [`HeldSignals::forward_to`]), and
//! ending with the program's own end ([`exit_by_signal`]).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use crate::sys::{exit_by_signal, hold_signals, is_forwarded, HeldSignals, SignalForwarding};

/// Exit status of a supervisor whose program was not found (`env`, `timeout`, shells).
pub const NOT_FOUND_STATUS: u8 = 127;
/// Exit status of a supervisor whose program was found but could not be run.
pub const CANNOT_RUN_STATUS: u8 = 126;

/// The program could not be started: the message names it and what to do,
/// and `status` is the exit status a supervisor leaves with (127 when it
/// does not exist, 126 when it cannot be run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LaunchError {
    /// 127 or 126.
    pub status: u8,
    /// What went wrong and the fix.
    pub message: String,
}

/// The search path `execvp` uses when `PATH` is not set.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The file `program` names, found as `execvp` finds it: a name with a
/// slash is a path; any other name is looked up in `path` (`$PATH`),
/// taking the first executable regular file. Not found: status 127; found
/// but not executable (or a directory): status 126.
pub fn resolve_program(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    let shown = Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(LaunchError {
            status: NOT_FOUND_STATUS,
            message: "the program name is empty: give a program after `--`".into(),
        });
    }
    if program.as_bytes().contains(&b'/') {
        let file = PathBuf::from(program);
        return match std::fs::metadata(&file) {
            Err(_) => Err(LaunchError {
                status: NOT_FOUND_STATUS,
                message: format!("{shown}: no such file: check the path"),
            }),
            Ok(meta) if meta.is_dir() => Err(LaunchError {
                status: CANNOT_RUN_STATUS,
                message: format!("{shown} is a directory, not a program"),
            }),
            Ok(_) if !crate::sys::may_execute(&file) => Err(LaunchError {
                status: CANNOT_RUN_STATUS,
                message: format!(
                    "{shown} is not executable (permission denied): `chmod +x` it, or run it through its interpreter"
                ),
            }),
            Ok(_) => Ok(file),
        };
    }
    let search: OsString = path
        .filter(|p| !p.is_empty())
        .map_or_else(|| DEFAULT_PATH.into(), OsStr::to_os_string);
    let mut not_executable = None;
    for dir in std::env::split_paths(&search) {
        // An empty PATH entry means the current directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && crate::sys::may_execute(&candidate) => {
                return Ok(candidate)
            }
            Ok(meta) if meta.is_file() => {
                not_executable.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    match not_executable {
        Some(file) => Err(LaunchError {
            status: CANNOT_RUN_STATUS,
            message: format!(
                "{} is not executable (permission denied): `chmod +x` it, or run it through its interpreter",
                file.display()
            ),
        }),
        None => Err(LaunchError {
            status: NOT_FOUND_STATUS,
            message: format!(
                "{shown}: command not found (not in any directory of PATH): check the name, install it, or give its path"
            ),
        }),
    }
}

/// The launch error for a program that `execve` refused although
/// [`resolve_program`] found it (it changed meanwhile, or the kernel cannot
/// run its format).
pub fn launch_error(program: &Path, error: &std::io::Error) -> LaunchError {
    let status = if error.kind() == std::io::ErrorKind::NotFound {
        NOT_FOUND_STATUS
    } else {
        CANNOT_RUN_STATUS
    };
    LaunchError {
        status,
        message: format!("cannot run {}: {error}", program.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        let sh = resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin"))).unwrap();
        assert_eq!(sh, Path::new("/bin/sh"));
        let e = resolve_program(OsStr::new("no-such-program-zpage"), None).unwrap_err();
        assert_eq!(e.status, 127, "{e}");
        assert!(e.message.contains("command not found"), "{e}");
        let e = resolve_program(OsStr::new("/nonexistent/prog"), None).unwrap_err();
        assert_eq!(e.status, 127, "{e}");
        let e = resolve_program(OsStr::new("/"), None).unwrap_err();
        assert_eq!(e.status, 126, "{e}");
        assert!(resolve_program(OsStr::new(""), None).is_err());
    }

    #[test]
    fn a_file_that_is_not_executable_is_126() {
        let dir = std::env::temp_dir().join(format!("zpage-resolve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plain");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let by_path = resolve_program(file.as_os_str(), None);
        let by_name = resolve_program(OsStr::new("plain"), Some(dir.as_os_str()));
        std::fs::remove_dir_all(&dir).unwrap();
        // Root may execute any file with an execute bit, and none here has one.
        let e = by_path.unwrap_err();
        assert_eq!(e.status, 126, "{e}");
        assert!(e.message.contains("chmod +x"), "{e}");
        assert_eq!(by_name.unwrap_err().status, 126);
    }

    #[test]
    fn supervisors_pass_on_what_others_send_and_keep_their_own_faults() {
        for s in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGWINCH,
            libc::SIGCONT,
            libc::SIGTSTP,
            libc::SIGALRM,
            libc::SIGRTMIN(),
            libc::SIGRTMAX(),
        ] {
            assert!(is_forwarded(s), "{s}");
        }
        for s in [
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGCHLD,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGTTOU,
            0,
            libc::SIGRTMIN() - 1,
            libc::SIGRTMAX() + 1,
        ] {
            assert!(!is_forwarded(s), "{s}");
        }
    }
}
