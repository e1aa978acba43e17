//! One rule for every wrapped call: pin the spans that lie in regions,
//! call, unpin.

use crate::spans::Spans;

/// Retries of a call whose buffers could not be pinned.
const RETRIES: usize = 8;

/// What a front end tells the wrappers: whether zpage is involved at all,
/// which memory is zpage's, and how zpage's own code is marked while it
/// pins (so the calls it makes meanwhile go straight through).
pub trait Policy {
    /// Held while zpage's code runs from a wrapper (pinning, restoring).
    type Inside;
    /// True if the call must go straight to the C library (zpage's own
    /// code, a forked child, no budget).
    fn passes_through(&self) -> bool;
    /// True if `[addr, addr + len)` touches a region. Called from signal
    /// handlers too: async-signal-safe, no allocation.
    fn in_region(&self, addr: usize, len: usize) -> bool;
    /// Marks the thread as inside zpage until the value is dropped.
    fn enter(&self) -> Self::Inside;
    /// A call ran with its buffers pinned.
    fn count_pinned(&self) {}
    /// A call was retried after its buffers were restored.
    fn count_retried(&self) {}
    /// What the user can do when a call keeps failing (the end of the line
    /// printed then).
    const ADVICE: &'static str;
}

/// `errno`.
pub fn errno() -> i32 {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets `errno`.
pub fn set_errno(value: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value }
}

/// Writes `text` to stderr with one system call, no allocation.
pub fn stderr_line(text: &str) {
    // SAFETY: a valid buffer of the given length; a raw system call, which
    // no wrapper sees.
    unsafe {
        libc::syscall(libc::SYS_write, 2, text.as_ptr(), text.len());
    }
}

fn involved<P: Policy>(policy: &P, spans: &Spans) -> bool {
    spans
        .as_slice()
        .iter()
        .any(|&(a, l)| policy.in_region(a, l))
}

/// True for the wrapped stdio functions, which make no system call of
/// their own on the caller's arguments.
fn stdio_copy(name: &str) -> bool {
    matches!(
        name,
        "fread" | "fwrite" | "fread_unlocked" | "fwrite_unlocked" | "__fread_chk"
    )
}

/// Runs `call` with every span that lies in a region pinned, or restored
/// and retried on `EFAULT` when pinning is refused (more than half the
/// budget, or more spans than [`crate::MAX_SPANS`]). `errno` is the call's.
pub fn guarded<P: Policy>(
    policy: &P,
    name: &str,
    spans: &Spans,
    raw: Option<(i64, [i64; 6])>,
    mut call: impl FnMut() -> isize,
) -> isize {
    if policy.passes_through() {
        return call();
    }
    if stdio_copy(name) && crate::trap::installed() {
        // stdio's fread and fwrite copy between the caller's buffer and the
        // stream's (a fault there is resolved as any other), and the system
        // calls they make on region memory, the stream's buffer or the
        // caller's, are trapped and served. Pinning here cost GNU sort,
        // which writes each line with fwrite_unlocked, 3 µs a line (4.2 s
        // instead of 0.8 s for 81 MB).
        return call();
    }
    if !involved(policy, spans) {
        if spans.overflowed() {
            return retried(policy, name, spans, call);
        }
        return call();
    }
    let pinned = !spans.overflowed() && {
        let _inside = policy.enter();
        let all = spans.as_slice();
        let done = all
            .iter()
            .take_while(|&&(a, l)| zpage_region::pin_range(a, l).is_ok())
            .count();
        if done < all.len() {
            for &(a, l) in &all[..done] {
                let _ = zpage_region::unpin_range(a, l);
            }
        }
        done == all.len()
    };
    if !pinned {
        return retried(policy, name, spans, call);
    }
    policy.count_pinned();
    let r = match raw {
        // The buffers are pinned: the call is made from the trampoline,
        // which the trap's filter lets through (through the C library it
        // would be trapped and pinned a second time). Its cancellation
        // point is not the C library's: a thread cancelled while blocked
        // here is cancelled at its next one.
        Some((nr, args)) if crate::trap::installed() => {
            // SAFETY: the wrapped function's own system call with the
            // caller's arguments, its memory pinned.
            let k = unsafe { zpage_region::far::syscall(nr, args) };
            if (-4095..0).contains(&k) {
                set_errno(-k as i32);
                -1
            } else {
                k as isize
            }
        }
        _ => call(),
    };
    let saved = errno();
    {
        let _inside = policy.enter();
        for &(a, l) in spans.as_slice() {
            let _ = zpage_region::unpin_range(a, l);
        }
    }
    set_errno(saved);
    r
}

/// The call with its buffers restored first, retried on `EFAULT` (the
/// reclaimer may take a page out again before the kernel reaches it).
fn retried<P: Policy>(
    policy: &P,
    name: &str,
    spans: &Spans,
    mut call: impl FnMut() -> isize,
) -> isize {
    for attempt in 0..RETRIES {
        {
            let _inside = policy.enter();
            for &(a, l) in spans.as_slice() {
                let _ = zpage_region::prefault_range(a, l);
            }
        }
        let r = call();
        if r != -1 || errno() != libc::EFAULT {
            return r;
        }
        // Not ours to retry if none of its buffers is zpage's (the overflow
        // case, where some were not recorded, always retries).
        if !spans.overflowed() && !involved(policy, spans) {
            return r;
        }
        if attempt + 1 < RETRIES {
            policy.count_retried();
        }
    }
    stderr_line("zpage: a wrapped call kept failing with EFAULT on zpage memory (buffers larger than half the budget, or more than 15 iovecs): ");
    stderr_line(name);
    stderr_line("(); ");
    stderr_line(P::ADVICE);
    stderr_line("\n");
    set_errno(libc::EFAULT);
    -1
}

/// Calls on one buffer larger than this are made in pieces of at most this
/// size, each pinned for its part (a buffer larger than half the budget
/// could not be pinned whole). Below the largest datagram a socket takes,
/// so a datagram is never split.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Whether a call made in pieces goes on after a full piece.
#[derive(Debug, Clone, Copy)]
pub enum Continue {
    /// Writes (and `fread`, which blocks until its count anyway): the pieces
    /// add up to the one call the caller made; a short piece ends it.
    Always,
    /// Reads: only on a regular file or block device, where reading on
    /// never blocks; elsewhere one piece is a short read (which the caller
    /// must accept from any `read`).
    IfRegularFile(libc::c_int),
    /// Receives: one piece, a short receive.
    Never,
}

fn is_regular_file(fd: libc::c_int) -> bool {
    // SAFETY: fstat writes one struct stat into ours; a raw call no
    // wrapper sees.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    let kind = st.st_mode & libc::S_IFMT;
    rc == 0 && (kind == libc::S_IFREG || kind == libc::S_IFBLK)
}

/// True if a call on `count` units of `unit` bytes at `addr` must be made
/// in pieces (see [`chunked`]).
pub fn needs_pieces<P: Policy>(policy: &P, addr: usize, count: usize, unit: usize) -> bool {
    let bytes = count.saturating_mul(unit.max(1));
    bytes > CHUNK_BYTES && !policy.passes_through() && policy.in_region(addr, bytes)
}

/// A call on one large buffer of `count` units of `unit` bytes at `addr`,
/// made in pieces of at most [`CHUNK_BYTES`] (halved while the pin is
/// refused), each pinned for its call. `call(offset, units)` makes the call
/// on units `offset..offset + units` and returns the units it moved, or -1.
/// Returns the units moved in all, or the first piece's failure.
///
/// Pieces are separate calls: a write made in pieces is not atomic as one
/// call would be (another thread's `fwrite` on the same stream, or another
/// process's write to the same `O_APPEND` file, may land between pieces).
/// The fortified `_chk` forms are not made in pieces (their length check
/// is against the whole buffer); they are pinned whole.
pub fn chunked<P: Policy>(
    policy: &P,
    name: &str,
    (addr, count, unit): (usize, usize, usize),
    go_on: Continue,
    mut call: impl FnMut(usize, usize) -> isize,
) -> isize {
    let unit = unit.max(1);
    let go_on = match go_on {
        Continue::Always => true,
        Continue::Never => false,
        Continue::IfRegularFile(fd) => is_regular_file(fd),
    };
    let mut per_piece = (CHUNK_BYTES / unit).max(1);
    let mut done = 0usize;
    while done < count {
        let piece = per_piece.min(count - done);
        let (at, len) = (addr + done * unit, piece * unit);
        let pinned = {
            let _inside = policy.enter();
            zpage_region::pin_range(at, len).is_ok()
        };
        if !pinned && len > zpage_region::PAGE_SIZE && per_piece > 1 {
            per_piece = (per_piece / 2).max(1);
            continue;
        }
        let moved = if pinned {
            policy.count_pinned();
            let r = call(done, piece);
            let saved = errno();
            {
                let _inside = policy.enter();
                let _ = zpage_region::unpin_range(at, len);
            }
            set_errno(saved);
            r
        } else {
            let mut spans = Spans::new();
            spans.add(at, len);
            retried(policy, name, &spans, || call(done, piece))
        };
        if moved < 0 {
            return if done == 0 { moved } else { done as isize };
        }
        done += moved as usize;
        if (moved as usize) < piece || !go_on {
            break;
        }
    }
    done as isize
}
