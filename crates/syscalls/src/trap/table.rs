//! What each x86-64 system call reads or writes through its arguments: one
//! line per call, from which both the seccomp filter (which arguments to
//! compare with the far range, or whether to trap the call always) and the
//! SIGSYS handler (which memory to pin before re-issuing it) are made.
//!
//! A call not listed has its six arguments compared and, when trapped, each
//! argument in the far range pinned for one page from the pointer: enough
//! for any fixed-size structure, which is what unknown calls take.
//!
//! Sizes are the kernel's x86-64 layouts (`struct stat` 144 bytes, `struct
//! kernel_sigaction` 32, `struct rusage` 144, ...). Async-signal-safe: a
//! `static` table, read only.

/// How long a buffer an argument points to is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Len {
    /// A fixed number of bytes.
    Fixed(usize),
    /// The value of argument `i`.
    Arg(u8),
    /// The value of argument `i` times a size (an array).
    ArgTimes(u8, usize),
    /// The value of argument `i` plus a size (a message with a header).
    ArgPlus(u8, usize),
    /// The 32-bit value argument `i` points to (`socklen_t *`).
    AtArg(u8),
}

/// What an argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Not a pointer the kernel follows.
    N,
    /// A buffer of a known length.
    Buf(Len),
    /// A NUL-terminated string.
    Str,
    /// A pointer to something of unknown size (pinned for one page).
    Unknown,
    /// An array of `struct iovec`, its count in argument `i`.
    Iovec(u8),
    /// A `struct msghdr`.
    Msghdr,
    /// An array of `struct mmsghdr`, its count in argument `i`.
    Mmsghdr(u8),
    /// Handled by the handler's own code for this call (its meaning depends
    /// on another argument, or the call needs more than pinning).
    Special,
}

/// What the filter does with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Compare the pointer arguments with the far range; trap if one is in it.
    Check,
    /// Always trap: the call names memory through pointers the filter
    /// cannot see (an iovec's buffers, `argv` strings), or must be seen.
    Always,
    /// Never trap: the call changes the thread's or the process's control
    /// flow or stack (`clone`, `rt_sigreturn`), so it cannot be re-issued
    /// from a signal handler; none of these reads a buffer in the range.
    Never,
    /// Fail with this errno, never run (asynchronous I/O whose buffers the
    /// kernel reads after the call returns: pinning for the call's span
    /// cannot cover it; programs fall back to plain system calls).
    Errno(i32),
    /// A filter of its own for this call (module `filter`).
    Own,
}

/// One system call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub nr: u32,
    pub name: &'static str,
    pub args: [Arg; 6],
    pub filter: Filter,
}

use Arg::{Iovec, Mmsghdr, Msghdr, Special, Str, Unknown, N};
use Filter::{Always, Check, Never, Own};
use Len::{Arg as A, ArgPlus, ArgTimes, AtArg, Fixed};

const fn b(len: Len) -> Arg {
    Arg::Buf(len)
}

/// One entry; the filter is `Always` when an argument names memory the
/// filter cannot see (iovecs, message headers), `Check` otherwise.
const fn c(nr: u32, name: &'static str, args: [Arg; 6]) -> Call {
    let mut filter = Check;
    let mut i = 0;
    while i < 6 {
        if matches!(args[i], Iovec(_) | Msghdr | Mmsghdr(_)) {
            filter = Always;
        }
        i += 1;
    }
    Call {
        nr,
        name,
        args,
        filter,
    }
}

/// An entry with a filter of its own choosing.
const fn f(nr: u32, name: &'static str, args: [Arg; 6], filter: Filter) -> Call {
    Call {
        nr,
        name,
        args,
        filter,
    }
}

const STAT: Arg = b(Fixed(144));
const TIMESPEC: Arg = b(Fixed(16));
const TIMEVAL: Arg = b(Fixed(16));
const ITIMERSPEC: Arg = b(Fixed(32));
const SIGSET: Arg = b(Fixed(8));
const SIGINFO: Arg = b(Fixed(128));
const RUSAGE: Arg = b(Fixed(144));
const INT: Arg = b(Fixed(4));
const LONG: Arg = b(Fixed(8));
const SIGEVENT: Arg = b(Fixed(64));
const RLIMIT: Arg = b(Fixed(16));
const TIMEX: Arg = b(Fixed(208));
const MQ_ATTR: Arg = b(Fixed(64));
/// `struct epoll_event` is packed on x86-64: 12 bytes.
const EPOLL_EVENT: usize = 12;
/// `struct pollfd`.
const POLLFD: usize = 8;
/// `struct io_event`.
const IO_EVENT: usize = 32;
/// `struct sembuf`.
const SEMBUF: usize = 6;

/// Every call the filter and the handler know, sorted by number.
pub static CALLS: &[Call] = &[
    c(0, "read", [N, b(A(2)), N, N, N, N]),
    c(1, "write", [N, b(A(2)), N, N, N, N]),
    c(2, "open", [Str, N, N, N, N, N]),
    c(3, "close", [N, N, N, N, N, N]),
    c(4, "stat", [Str, STAT, N, N, N, N]),
    c(5, "fstat", [N, STAT, N, N, N, N]),
    c(6, "lstat", [Str, STAT, N, N, N, N]),
    c(7, "poll", [b(ArgTimes(1, POLLFD)), N, N, N, N, N]),
    c(8, "lseek", [N, N, N, N, N, N]),
    // The memory-map calls take addresses, not buffers: a range in the far
    // range is what they manage, never memory they read.
    c(9, "mmap", [N, N, N, N, N, N]),
    c(10, "mprotect", [N, N, N, N, N, N]),
    c(11, "munmap", [N, N, N, N, N, N]),
    c(12, "brk", [N, N, N, N, N, N]),
    // Only pointers into the range trap, never a call for what it asks:
    // the filter stays in programs exec'd without zpage, which must never
    // be trapped (a trap with no handler kills). So setting SIGBUS's
    // action, or blocking signals, is seen by the preload library's
    // wrappers of the C library's functions, and by the trap only when its
    // structures lie in region memory (served then on the saved mask).
    c(13, "rt_sigaction", [N, b(Fixed(32)), b(Fixed(32)), N, N, N]),
    f(14, "rt_sigprocmask", [N, Special, Special, N, N, N], Check),
    f(15, "rt_sigreturn", [N, N, N, N, N, N], Never),
    f(16, "ioctl", [N, N, Special, N, N, N], Check),
    c(17, "pread64", [N, b(A(2)), N, N, N, N]),
    c(18, "pwrite64", [N, b(A(2)), N, N, N, N]),
    c(19, "readv", [N, Iovec(2), N, N, N, N]),
    c(20, "writev", [N, Iovec(2), N, N, N, N]),
    c(21, "access", [Str, N, N, N, N, N]),
    c(22, "pipe", [b(Fixed(8)), N, N, N, N, N]),
    f(
        23,
        "select",
        [N, Special, Special, Special, TIMEVAL, N],
        Check,
    ),
    c(24, "sched_yield", [N; 6]),
    c(25, "mremap", [N; 6]),
    c(26, "msync", [N; 6]),
    f(27, "mincore", [N, N, Special, N, N, N], Check),
    c(28, "madvise", [N; 6]),
    c(29, "shmget", [N; 6]),
    c(30, "shmat", [N; 6]),
    c(31, "shmctl", [N, N, b(Fixed(112)), N, N, N]),
    c(32, "dup", [N; 6]),
    c(33, "dup2", [N; 6]),
    c(34, "pause", [N; 6]),
    c(35, "nanosleep", [TIMESPEC, TIMESPEC, N, N, N, N]),
    c(36, "getitimer", [N, ITIMERSPEC, N, N, N, N]),
    c(37, "alarm", [N; 6]),
    c(38, "setitimer", [N, ITIMERSPEC, ITIMERSPEC, N, N, N]),
    c(39, "getpid", [N; 6]),
    c(40, "sendfile", [N, N, LONG, N, N, N]),
    c(41, "socket", [N; 6]),
    c(42, "connect", [N, b(A(2)), N, N, N, N]),
    c(43, "accept", [N, b(AtArg(2)), INT, N, N, N]),
    c(44, "sendto", [N, b(A(2)), N, N, b(A(5)), N]),
    c(45, "recvfrom", [N, b(A(2)), N, N, b(AtArg(5)), INT]),
    c(46, "sendmsg", [N, Msghdr, N, N, N, N]),
    c(47, "recvmsg", [N, Msghdr, N, N, N, N]),
    c(48, "shutdown", [N; 6]),
    c(49, "bind", [N, b(A(2)), N, N, N, N]),
    c(50, "listen", [N; 6]),
    c(51, "getsockname", [N, b(AtArg(2)), INT, N, N, N]),
    c(52, "getpeername", [N, b(AtArg(2)), INT, N, N, N]),
    c(53, "socketpair", [N, N, N, b(Fixed(8)), N, N]),
    c(54, "setsockopt", [N, N, N, b(A(4)), N, N]),
    c(55, "getsockopt", [N, N, N, b(AtArg(4)), INT, N]),
    f(56, "clone", [N; 6], Never),
    f(57, "fork", [N; 6], Never),
    f(58, "vfork", [N; 6], Never),
    // Trapped when the path or the arrays lie in region memory (strings
    // the arrays point to are not seen; an evicted one fails the call with
    // EFAULT before anything changes). Not always: a posix_spawn child
    // resets every handler to the default before its exec, and a trap there
    // would kill it (the preload library hands posix_spawn copies outside
    // the range for that reason).
    f(59, "execve", [Str, Special, Special, N, N, N], Check),
    f(60, "exit", [N; 6], Never),
    c(61, "wait4", [N, INT, N, RUSAGE, N, N]),
    c(62, "kill", [N; 6]),
    c(63, "uname", [b(Fixed(390)), N, N, N, N, N]),
    c(64, "semget", [N; 6]),
    c(65, "semop", [N, b(ArgTimes(2, SEMBUF)), N, N, N, N]),
    c(66, "semctl", [N, N, N, Unknown, N, N]),
    c(67, "shmdt", [N; 6]),
    c(68, "msgget", [N; 6]),
    c(69, "msgsnd", [N, b(ArgPlus(2, 8)), N, N, N, N]),
    c(70, "msgrcv", [N, b(ArgPlus(2, 8)), N, N, N, N]),
    c(71, "msgctl", [N, N, b(Fixed(120)), N, N, N]),
    f(72, "fcntl", [N, N, Special, N, N, N], Check),
    c(73, "flock", [N; 6]),
    c(74, "fsync", [N; 6]),
    c(75, "fdatasync", [N; 6]),
    c(76, "truncate", [Str, N, N, N, N, N]),
    c(77, "ftruncate", [N; 6]),
    c(78, "getdents", [N, b(A(2)), N, N, N, N]),
    c(79, "getcwd", [b(A(1)), N, N, N, N, N]),
    c(80, "chdir", [Str, N, N, N, N, N]),
    c(81, "fchdir", [N; 6]),
    c(82, "rename", [Str, Str, N, N, N, N]),
    c(83, "mkdir", [Str, N, N, N, N, N]),
    c(84, "rmdir", [Str, N, N, N, N, N]),
    c(85, "creat", [Str, N, N, N, N, N]),
    c(86, "link", [Str, Str, N, N, N, N]),
    c(87, "unlink", [Str, N, N, N, N, N]),
    c(88, "symlink", [Str, Str, N, N, N, N]),
    c(89, "readlink", [Str, b(A(2)), N, N, N, N]),
    c(90, "chmod", [Str, N, N, N, N, N]),
    c(91, "fchmod", [N; 6]),
    c(92, "chown", [Str, N, N, N, N, N]),
    c(93, "fchown", [N; 6]),
    c(94, "lchown", [Str, N, N, N, N, N]),
    c(95, "umask", [N; 6]),
    c(96, "gettimeofday", [TIMEVAL, b(Fixed(8)), N, N, N, N]),
    c(97, "getrlimit", [N, RLIMIT, N, N, N, N]),
    c(98, "getrusage", [N, RUSAGE, N, N, N, N]),
    c(99, "sysinfo", [b(Fixed(112)), N, N, N, N, N]),
    c(100, "times", [b(Fixed(32)), N, N, N, N, N]),
    c(101, "ptrace", [N, N, Unknown, Unknown, N, N]),
    c(102, "getuid", [N; 6]),
    c(103, "syslog", [N, b(A(2)), N, N, N, N]),
    c(104, "getgid", [N; 6]),
    c(105, "setuid", [N; 6]),
    c(106, "setgid", [N; 6]),
    c(107, "geteuid", [N; 6]),
    c(108, "getegid", [N; 6]),
    c(109, "setpgid", [N; 6]),
    c(110, "getppid", [N; 6]),
    c(111, "getpgrp", [N; 6]),
    c(112, "setsid", [N; 6]),
    c(113, "setreuid", [N; 6]),
    c(114, "setregid", [N; 6]),
    c(115, "getgroups", [N, b(ArgTimes(0, 4)), N, N, N, N]),
    c(116, "setgroups", [N, b(ArgTimes(0, 4)), N, N, N, N]),
    c(117, "setresuid", [N; 6]),
    c(118, "getresuid", [INT, INT, INT, N, N, N]),
    c(119, "setresgid", [N; 6]),
    c(120, "getresgid", [INT, INT, INT, N, N, N]),
    c(121, "getpgid", [N; 6]),
    c(122, "setfsuid", [N; 6]),
    c(123, "setfsgid", [N; 6]),
    c(124, "getsid", [N; 6]),
    c(125, "capget", [b(Fixed(8)), b(Fixed(24)), N, N, N, N]),
    c(126, "capset", [b(Fixed(8)), b(Fixed(24)), N, N, N, N]),
    c(127, "rt_sigpending", [b(A(1)), N, N, N, N, N]),
    c(128, "rt_sigtimedwait", [SIGSET, SIGINFO, TIMESPEC, N, N, N]),
    c(129, "rt_sigqueueinfo", [N, N, SIGINFO, N, N, N]),
    c(130, "rt_sigsuspend", [SIGSET, N, N, N, N, N]),
    c(131, "sigaltstack", [b(Fixed(24)), b(Fixed(24)), N, N, N, N]),
    c(132, "utime", [Str, b(Fixed(16)), N, N, N, N]),
    c(133, "mknod", [Str, N, N, N, N, N]),
    c(134, "uselib", [Str, N, N, N, N, N]),
    c(135, "personality", [N; 6]),
    c(136, "ustat", [N, b(Fixed(32)), N, N, N, N]),
    c(137, "statfs", [Str, b(Fixed(120)), N, N, N, N]),
    c(138, "fstatfs", [N, b(Fixed(120)), N, N, N, N]),
    c(139, "sysfs", [N, Unknown, Unknown, N, N, N]),
    c(140, "getpriority", [N; 6]),
    c(141, "setpriority", [N; 6]),
    c(142, "sched_setparam", [N, INT, N, N, N, N]),
    c(143, "sched_getparam", [N, INT, N, N, N, N]),
    c(144, "sched_setscheduler", [N, N, INT, N, N, N]),
    c(145, "sched_getscheduler", [N; 6]),
    c(146, "sched_get_priority_max", [N; 6]),
    c(147, "sched_get_priority_min", [N; 6]),
    c(148, "sched_rr_get_interval", [N, TIMESPEC, N, N, N, N]),
    c(149, "mlock", [N; 6]),
    c(150, "munlock", [N; 6]),
    c(151, "mlockall", [N; 6]),
    c(152, "munlockall", [N; 6]),
    c(153, "vhangup", [N; 6]),
    c(154, "modify_ldt", [N, b(A(2)), N, N, N, N]),
    c(155, "pivot_root", [Str, Str, N, N, N, N]),
    c(156, "_sysctl", [Unknown, N, N, N, N, N]),
    f(
        157,
        "prctl",
        [N, Special, Special, Special, Special, N],
        Check,
    ),
    c(158, "arch_prctl", [N, Unknown, N, N, N, N]),
    c(159, "adjtimex", [TIMEX, N, N, N, N, N]),
    c(160, "setrlimit", [N, RLIMIT, N, N, N, N]),
    c(161, "chroot", [Str, N, N, N, N, N]),
    c(162, "sync", [N; 6]),
    c(163, "acct", [Str, N, N, N, N, N]),
    c(164, "settimeofday", [TIMEVAL, b(Fixed(8)), N, N, N, N]),
    c(165, "mount", [Str, Str, Str, N, Unknown, N]),
    c(166, "umount2", [Str, N, N, N, N, N]),
    c(167, "swapon", [Str, N, N, N, N, N]),
    c(168, "swapoff", [Str, N, N, N, N, N]),
    c(169, "reboot", [N, N, N, Unknown, N, N]),
    c(170, "sethostname", [b(A(1)), N, N, N, N, N]),
    c(171, "setdomainname", [b(A(1)), N, N, N, N, N]),
    c(172, "iopl", [N; 6]),
    c(173, "ioperm", [N; 6]),
    c(175, "init_module", [b(A(1)), N, Str, N, N, N]),
    c(176, "delete_module", [Str, N, N, N, N, N]),
    c(179, "quotactl", [N, Str, N, Unknown, N, N]),
    c(186, "gettid", [N; 6]),
    c(187, "readahead", [N; 6]),
    c(188, "setxattr", [Str, Str, b(A(3)), N, N, N]),
    c(189, "lsetxattr", [Str, Str, b(A(3)), N, N, N]),
    c(190, "fsetxattr", [N, Str, b(A(3)), N, N, N]),
    c(191, "getxattr", [Str, Str, b(A(3)), N, N, N]),
    c(192, "lgetxattr", [Str, Str, b(A(3)), N, N, N]),
    c(193, "fgetxattr", [N, Str, b(A(3)), N, N, N]),
    c(194, "listxattr", [Str, b(A(2)), N, N, N, N]),
    c(195, "llistxattr", [Str, b(A(2)), N, N, N, N]),
    c(196, "flistxattr", [N, b(A(2)), N, N, N, N]),
    c(197, "removexattr", [Str, Str, N, N, N, N]),
    c(198, "lremovexattr", [Str, Str, N, N, N, N]),
    c(199, "fremovexattr", [N, Str, N, N, N, N]),
    c(200, "tkill", [N; 6]),
    c(201, "time", [LONG, N, N, N, N, N]),
    // FUTEX_WAKE on a private futex reads no memory and is what every
    // contended unlock makes: the filter lets it through.
    f(202, "futex", [Special, N, N, Special, Special, N], Own),
    c(203, "sched_setaffinity", [N, N, b(A(1)), N, N, N]),
    c(204, "sched_getaffinity", [N, N, b(A(1)), N, N, N]),
    c(205, "set_thread_area", [b(Fixed(16)), N, N, N, N, N]),
    f(
        206,
        "io_setup",
        [N, LONG, N, N, N, N],
        Filter::Errno(libc::ENOSYS),
    ),
    c(207, "io_destroy", [N; 6]),
    c(
        208,
        "io_getevents",
        [N, N, N, b(ArgTimes(2, IO_EVENT)), TIMESPEC, N],
    ),
    f(209, "io_submit", [N; 6], Filter::Errno(libc::ENOSYS)),
    c(
        210,
        "io_cancel",
        [N, b(Fixed(64)), b(Fixed(IO_EVENT)), N, N, N],
    ),
    c(211, "get_thread_area", [b(Fixed(16)), N, N, N, N, N]),
    c(213, "epoll_create", [N; 6]),
    c(216, "remap_file_pages", [N; 6]),
    c(217, "getdents64", [N, b(A(2)), N, N, N, N]),
    c(218, "set_tid_address", [N; 6]),
    f(219, "restart_syscall", [N; 6], Never),
    c(
        220,
        "semtimedop",
        [N, b(ArgTimes(2, SEMBUF)), N, TIMESPEC, N, N],
    ),
    c(221, "fadvise64", [N; 6]),
    c(222, "timer_create", [N, SIGEVENT, INT, N, N, N]),
    c(223, "timer_settime", [N, N, ITIMERSPEC, ITIMERSPEC, N, N]),
    c(224, "timer_gettime", [N, ITIMERSPEC, N, N, N, N]),
    c(225, "timer_getoverrun", [N; 6]),
    c(226, "timer_delete", [N; 6]),
    c(227, "clock_settime", [N, TIMESPEC, N, N, N, N]),
    c(228, "clock_gettime", [N, TIMESPEC, N, N, N, N]),
    c(229, "clock_getres", [N, TIMESPEC, N, N, N, N]),
    c(230, "clock_nanosleep", [N, N, TIMESPEC, TIMESPEC, N, N]),
    f(231, "exit_group", [N; 6], Never),
    c(
        232,
        "epoll_wait",
        [N, b(ArgTimes(2, EPOLL_EVENT)), N, N, N, N],
    ),
    c(233, "epoll_ctl", [N, N, N, b(Fixed(EPOLL_EVENT)), N, N]),
    c(234, "tgkill", [N; 6]),
    c(235, "utimes", [Str, b(Fixed(32)), N, N, N, N]),
    c(237, "mbind", [N, N, N, Unknown, N, N]),
    c(238, "set_mempolicy", [N, Unknown, N, N, N, N]),
    c(239, "get_mempolicy", [INT, Unknown, N, N, N, N]),
    c(240, "mq_open", [Str, N, N, MQ_ATTR, N, N]),
    c(241, "mq_unlink", [Str, N, N, N, N, N]),
    c(242, "mq_timedsend", [N, b(A(2)), N, N, TIMESPEC, N]),
    c(243, "mq_timedreceive", [N, b(A(2)), N, INT, TIMESPEC, N]),
    c(244, "mq_notify", [N, SIGEVENT, N, N, N, N]),
    c(245, "mq_getsetattr", [N, MQ_ATTR, MQ_ATTR, N, N, N]),
    c(246, "kexec_load", [N, N, Unknown, N, N, N]),
    c(247, "waitid", [N, N, SIGINFO, N, RUSAGE, N]),
    c(248, "add_key", [Str, Str, b(A(3)), N, N, N]),
    c(249, "request_key", [Str, Str, Str, N, N, N]),
    c(250, "keyctl", [N, Unknown, Unknown, Unknown, Unknown, N]),
    c(251, "ioprio_set", [N; 6]),
    c(252, "ioprio_get", [N; 6]),
    c(253, "inotify_init", [N; 6]),
    c(254, "inotify_add_watch", [N, Str, N, N, N, N]),
    c(255, "inotify_rm_watch", [N; 6]),
    c(256, "migrate_pages", [N, N, Unknown, Unknown, N, N]),
    c(257, "openat", [N, Str, N, N, N, N]),
    c(258, "mkdirat", [N, Str, N, N, N, N]),
    c(259, "mknodat", [N, Str, N, N, N, N]),
    c(260, "fchownat", [N, Str, N, N, N, N]),
    c(261, "futimesat", [N, Str, b(Fixed(32)), N, N, N]),
    c(262, "newfstatat", [N, Str, STAT, N, N, N]),
    c(263, "unlinkat", [N, Str, N, N, N, N]),
    c(264, "renameat", [N, Str, N, Str, N, N]),
    c(265, "linkat", [N, Str, N, Str, N, N]),
    c(266, "symlinkat", [Str, N, Str, N, N, N]),
    c(267, "readlinkat", [N, Str, b(A(3)), N, N, N]),
    c(268, "fchmodat", [N, Str, N, N, N, N]),
    c(269, "faccessat", [N, Str, N, N, N, N]),
    // The sixth argument points to {sigset pointer, size}: a pointer the
    // filter cannot see.
    f(
        270,
        "pselect6",
        [N, Special, Special, Special, TIMESPEC, Special],
        Always,
    ),
    c(
        271,
        "ppoll",
        [b(ArgTimes(1, POLLFD)), N, TIMESPEC, SIGSET, N, N],
    ),
    c(272, "unshare", [N; 6]),
    c(273, "set_robust_list", [N; 6]),
    c(274, "get_robust_list", [N, LONG, LONG, N, N, N]),
    c(275, "splice", [N, LONG, N, LONG, N, N]),
    c(276, "tee", [N; 6]),
    c(277, "sync_file_range", [N; 6]),
    c(278, "vmsplice", [N, Iovec(2), N, N, N, N]),
    c(
        279,
        "move_pages",
        [
            N,
            N,
            b(ArgTimes(1, 8)),
            b(ArgTimes(1, 4)),
            b(ArgTimes(1, 4)),
            N,
        ],
    ),
    c(280, "utimensat", [N, Str, b(Fixed(32)), N, N, N]),
    c(
        281,
        "epoll_pwait",
        [N, b(ArgTimes(2, EPOLL_EVENT)), N, N, SIGSET, N],
    ),
    c(282, "signalfd", [N, SIGSET, N, N, N, N]),
    c(283, "timerfd_create", [N; 6]),
    c(284, "eventfd", [N; 6]),
    c(285, "fallocate", [N; 6]),
    c(286, "timerfd_settime", [N, N, ITIMERSPEC, ITIMERSPEC, N, N]),
    c(287, "timerfd_gettime", [N, ITIMERSPEC, N, N, N, N]),
    c(288, "accept4", [N, b(AtArg(2)), INT, N, N, N]),
    c(289, "signalfd4", [N, SIGSET, N, N, N, N]),
    c(290, "eventfd2", [N; 6]),
    c(291, "epoll_create1", [N; 6]),
    c(292, "dup3", [N; 6]),
    c(293, "pipe2", [b(Fixed(8)), N, N, N, N, N]),
    c(294, "inotify_init1", [N; 6]),
    c(295, "preadv", [N, Iovec(2), N, N, N, N]),
    c(296, "pwritev", [N, Iovec(2), N, N, N, N]),
    c(297, "rt_tgsigqueueinfo", [N, N, N, SIGINFO, N, N]),
    c(298, "perf_event_open", [Unknown, N, N, N, N, N]),
    c(299, "recvmmsg", [N, Mmsghdr(2), N, N, TIMESPEC, N]),
    c(300, "fanotify_init", [N; 6]),
    c(301, "fanotify_mark", [N, N, N, N, Str, N]),
    c(302, "prlimit64", [N, N, RLIMIT, RLIMIT, N, N]),
    c(303, "name_to_handle_at", [N, Str, Unknown, INT, N, N]),
    c(304, "open_by_handle_at", [N, Unknown, N, N, N, N]),
    c(305, "clock_adjtime", [N, TIMEX, N, N, N, N]),
    c(306, "syncfs", [N; 6]),
    c(307, "sendmmsg", [N, Mmsghdr(2), N, N, N, N]),
    c(308, "setns", [N; 6]),
    c(309, "getcpu", [INT, INT, N, N, N, N]),
    c(310, "process_vm_readv", [N, Iovec(2), N, N, N, N]),
    c(311, "process_vm_writev", [N, Iovec(2), N, N, N, N]),
    c(312, "kcmp", [N; 6]),
    c(313, "finit_module", [N, Str, N, N, N, N]),
    c(314, "sched_setattr", [N, b(Fixed(56)), N, N, N, N]),
    c(315, "sched_getattr", [N, b(A(2)), N, N, N, N]),
    c(316, "renameat2", [N, Str, N, Str, N, N]),
    // A program's own filter: `struct sock_fprog` points to its program.
    f(317, "seccomp", [N, N, Special, N, N, N], Always),
    c(318, "getrandom", [b(A(1)), N, N, N, N, N]),
    c(319, "memfd_create", [Str, N, N, N, N, N]),
    c(320, "kexec_file_load", [N, N, N, Str, N, N]),
    c(321, "bpf", [N, b(A(2)), N, N, N, N]),
    f(322, "execveat", [N, Str, Special, Special, N, N], Check),
    c(323, "userfaultfd", [N; 6]),
    c(324, "membarrier", [N; 6]),
    c(325, "mlock2", [N; 6]),
    c(326, "copy_file_range", [N, LONG, N, LONG, N, N]),
    c(327, "preadv2", [N, Iovec(2), N, N, N, N]),
    c(328, "pwritev2", [N, Iovec(2), N, N, N, N]),
    c(329, "pkey_mprotect", [N; 6]),
    c(330, "pkey_alloc", [N; 6]),
    c(331, "pkey_free", [N; 6]),
    c(332, "statx", [N, Str, N, N, b(Fixed(256)), N]),
    c(
        333,
        "io_pgetevents",
        [N, N, N, b(ArgTimes(2, IO_EVENT)), TIMESPEC, Unknown],
    ),
    c(334, "rseq", [N, N, N, N, N, N]),
    c(424, "pidfd_send_signal", [N, N, SIGINFO, N, N, N]),
    f(425, "io_uring_setup", [N; 6], Filter::Errno(libc::ENOSYS)),
    f(426, "io_uring_enter", [N; 6], Filter::Errno(libc::ENOSYS)),
    f(
        427,
        "io_uring_register",
        [N; 6],
        Filter::Errno(libc::ENOSYS),
    ),
    c(428, "open_tree", [N, Str, N, N, N, N]),
    c(429, "move_mount", [N, Str, N, Str, N, N]),
    c(430, "fsopen", [Str, N, N, N, N, N]),
    c(431, "fsconfig", [N, N, Str, Unknown, N, N]),
    c(432, "fsmount", [N; 6]),
    c(433, "fspick", [N, Str, N, N, N, N]),
    c(434, "pidfd_open", [N; 6]),
    f(435, "clone3", [N; 6], Never),
    c(436, "close_range", [N; 6]),
    c(437, "openat2", [N, Str, b(A(3)), N, N, N]),
    c(438, "pidfd_getfd", [N; 6]),
    c(439, "faccessat2", [N, Str, N, N, N, N]),
    // The iovecs name address ranges to advise, not memory the kernel reads.
    c(440, "process_madvise", [N, b(ArgTimes(2, 16)), N, N, N, N]),
    c(
        441,
        "epoll_pwait2",
        [N, b(ArgTimes(2, EPOLL_EVENT)), N, TIMESPEC, SIGSET, N],
    ),
    c(442, "mount_setattr", [N, Str, N, b(A(4)), N, N]),
    c(443, "quotactl_fd", [N, N, N, Unknown, N, N]),
    c(444, "landlock_create_ruleset", [b(A(1)), N, N, N, N, N]),
    c(445, "landlock_add_rule", [N, N, Unknown, N, N, N]),
    c(446, "landlock_restrict_self", [N; 6]),
    c(447, "memfd_secret", [N; 6]),
    c(448, "process_mrelease", [N; 6]),
    // Each waiter names its futex word: pointers the filter cannot see.
    f(449, "futex_waitv", [Special, N, N, TIMESPEC, N, N], Always),
    c(450, "set_mempolicy_home_node", [N; 6]),
    c(451, "cachestat", [N, b(Fixed(16)), b(Fixed(32)), N, N, N]),
    c(452, "fchmodat2", [N, Str, N, N, N, N]),
    c(453, "map_shadow_stack", [N; 6]),
    c(454, "futex_wake", [INT, N, N, N, N, N]),
    c(455, "futex_wait", [INT, N, N, N, TIMESPEC, N]),
    f(456, "futex_requeue", [Special, N, N, N, N, N], Always),
    c(457, "statmount", [b(Fixed(32)), b(A(2)), N, N, N, N]),
    c(
        458,
        "listmount",
        [b(Fixed(32)), b(ArgTimes(2, 8)), N, N, N, N],
    ),
    c(459, "lsm_get_self_attr", [N, b(AtArg(2)), INT, N, N, N]),
    c(460, "lsm_set_self_attr", [N, b(A(2)), N, N, N, N]),
    c(461, "lsm_list_modules", [b(AtArg(1)), INT, N, N, N, N]),
    c(462, "mseal", [N; 6]),
    c(463, "setxattrat", [N, Str, N, Str, b(A(5)), N]),
    c(464, "getxattrat", [N, Str, N, Str, b(A(5)), N]),
    c(465, "listxattrat", [N, Str, N, b(A(4)), N, N]),
    c(466, "removexattrat", [N, Str, N, Str, N, N]),
    c(467, "open_tree_attr", [N, Str, N, b(A(4)), N, N]),
    c(468, "file_getattr", [N, Str, b(A(3)), N, N, N]),
    c(469, "file_setattr", [N, Str, b(A(3)), N, N, N]),
];

/// A call not in the table: every argument may be a pointer.
pub const UNKNOWN: Call = Call {
    nr: u32::MAX,
    name: "an unknown system call",
    args: [Unknown; 6],
    filter: Check,
};

/// The entry for `nr` (binary search of the sorted table; async-signal-safe).
pub fn lookup(nr: u32) -> &'static Call {
    match CALLS.binary_search_by_key(&nr, |c| c.nr) {
        Ok(i) => &CALLS[i],
        Err(_) => &UNKNOWN,
    }
}

/// Bit `i` set for each argument the filter compares with the far range.
pub fn pointer_mask(call: &Call) -> u8 {
    let mut mask = 0;
    for (i, arg) in call.args.iter().enumerate() {
        if *arg != N {
            mask |= 1 << i;
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_without_repeats_and_names_libc_numbers() {
        for w in CALLS.windows(2) {
            assert!(w[0].nr < w[1].nr, "{} then {}", w[0].name, w[1].name);
        }
        let known = [
            (libc::SYS_read, "read"),
            (libc::SYS_futex, "futex"),
            (libc::SYS_execve, "execve"),
            (libc::SYS_accept4, "accept4"),
            (libc::SYS_wait4, "wait4"),
            (libc::SYS_io_uring_setup, "io_uring_setup"),
            (libc::SYS_clone3, "clone3"),
            (libc::SYS_statx, "statx"),
            (libc::SYS_process_madvise, "process_madvise"),
            (libc::SYS_futex_waitv, "futex_waitv"),
        ];
        for (nr, name) in known {
            assert_eq!(lookup(nr as u32).name, name);
        }
        assert_eq!(lookup(1000).name, UNKNOWN.name);
    }

    #[test]
    fn indirect_memory_means_always_trapped() {
        for name in ["readv", "sendmsg", "recvmmsg", "pselect6", "vmsplice"] {
            let call = CALLS.iter().find(|c| c.name == name).unwrap();
            assert_eq!(call.filter, Filter::Always, "{name}");
        }
        let read = lookup(0);
        assert_eq!((read.filter, pointer_mask(read)), (Filter::Check, 0b10));
        assert_eq!(pointer_mask(lookup(libc::SYS_mmap as u32)), 0);
    }
}
