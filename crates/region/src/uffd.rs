//! The userfaultfds zpage owns: made with the features a budget needs,
//! closed on drop unless the program closed them first, and replaced at the
//! same descriptor number in a forked child.

use crate::config::FaultMode;
use crate::error::RegionError;
use crate::sys::{self, Errno};
use std::sync::atomic::{AtomicBool, Ordering};

/// A userfaultfd zpage owns. Closed on drop, unless the program closed it
/// first (the number may belong to someone else by then).
#[derive(Debug)]
pub struct Uffd {
    fd: i32,
    lost: AtomicBool,
}

impl Uffd {
    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// Creates a uffd with `features`; `kernel_faults` asks for one that
    /// traps kernel-mode accesses too (privileged).
    pub fn new(features: u64, kernel_faults: bool, mode: FaultMode) -> Result<Uffd, RegionError> {
        let base_flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let fd = if kernel_faults {
            match sys::userfaultfd(base_flags) {
                Ok(fd) => fd,
                Err(e) => sys::userfaultfd_dev(base_flags).map_err(|_| unavailable(e, mode))?,
            }
        } else {
            sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY)
                .map_err(|e| unavailable(e, mode))?
        };
        // Owned from here: an early return closes it.
        let uffd = Uffd {
            fd: sys::dup_high(fd, 512),
            lost: AtomicBool::new(false),
        };
        match sys::uffd_api(uffd.fd, features) {
            Ok(_) => Ok(uffd),
            Err(e) => {
                // Learn what is there, for the error message.
                let available = match sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY) {
                    Ok(probe) => {
                        let available = sys::uffd_api(probe, 0).unwrap_or(0);
                        sys::close(probe);
                        available
                    }
                    Err(_) => 0,
                };
                if features & !available != 0 {
                    Err(RegionError::FeaturesMissing {
                        missing: features & !available,
                        available,
                    })
                } else {
                    Err(RegionError::sys("UFFDIO_API", e))
                }
            }
        }
    }

    /// In a forked child: puts a fresh userfaultfd with `features` at this
    /// one's descriptor number. The inherited descriptor names the parent's
    /// context: ioctls on it would act on the parent's memory.
    pub fn replace_in_child(&self, features: u64) -> Result<(), Errno> {
        let fd = sys::userfaultfd(libc::O_CLOEXEC | libc::O_NONBLOCK | sys::UFFD_USER_MODE_ONLY)?;
        if let Err(e) = sys::uffd_api(fd, features) {
            sys::close(fd);
            return Err(e);
        }
        sys::replace_fd(fd, self.fd)?;
        self.lost.store(false, Ordering::Release);
        Ok(())
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        if !self.is_lost() {
            sys::close(self.fd);
        }
    }
}

fn unavailable(e: Errno, mode: FaultMode) -> RegionError {
    RegionError::UffdUnavailable {
        errno: e.to_string(),
        fix: match mode {
            FaultMode::Sigbus => "zpage needs userfaultfd(2) with UFFD_USER_MODE_ONLY (Linux >= 5.11, CONFIG_USERFAULTFD=y; not blocked by seccomp)",
            FaultMode::HandlerThread => "FaultMode::HandlerThread traps kernel-mode faults and so needs CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1, or read-write access to /dev/userfaultfd; or use FaultMode::Sigbus, which needs no privilege",
        },
    }
}
