// The environment `zpage run` sets for the library: the names both sides
// use for the process's own settings. The budget's options travel under
// the names the option list gives them (`zpage_region::BUDGET_OPTIONS`,
// `ZPAGE_RUN_<NAME>`). A file of its own, holding only these constants, because the
// `zpage` binary takes them with `include!`: it cannot depend on this
// crate, a cdylib whose interposers (malloc, mmap...) and load-time
// constructor must never be linked into zpage itself.

/// Bytes of region memory the process may keep resident (required).
pub const BUDGET_ENV: &str = "ZPAGE_RUN_BUDGET_BYTES";
/// [`BUDGET_ENV`], NUL-terminated (for `getenv` before anything else runs).
pub const BUDGET_ENV_C: &str = "ZPAGE_RUN_BUDGET_BYTES\0";
/// Smallest mapping placed in the arena (default: every mapping).
pub const MIN_MAPPING_ENV: &str = "ZPAGE_RUN_MIN_MAPPING_BYTES";
/// Milliseconds between two passes giving the process's file pages back
/// (`zpage_region::BudgetConfig::file_pages_every`); unset or 0: never.
pub const FILE_PAGES_EVERY_ENV: &str = "ZPAGE_RUN_FILE_PAGES_EVERY_MS";
/// How system calls on region memory are served: `trap` (the default: a
/// seccomp filter traps every call that names region memory, whoever makes
/// it) or `wrappers` (only the C library functions the library wraps; the
/// C library's own calls and raw system calls on evicted memory fail with
/// `EFAULT`). `wrappers` is for programs that must `exec` set-user-ID
/// programs as a user other than root (the filter needs `no_new_privs`).
pub const SYSCALLS_ENV: &str = "ZPAGE_RUN_SYSCALLS";
/// [`SYSCALLS_ENV`], NUL-terminated (for `getenv` at the first `malloc`).
pub const SYSCALLS_ENV_C: &str = "ZPAGE_RUN_SYSCALLS\0";
