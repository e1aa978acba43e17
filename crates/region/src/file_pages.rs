//! File pages given back (`BudgetConfig::file_pages_every`): the process's
//! read-only private file mappings (its program, its libraries, the data
//! files it maps to read) handed to the kernel's reclaim with
//! `MADV_PAGEOUT` at a fixed interval, so the pages it no longer uses leave
//! its resident memory.
//!
//! Why: a region holds only anonymous memory, but a program's resident
//! memory, as `VmRSS`, a container's limit and the OOM killer count it, also
//! holds the file pages it has touched. Most of those are touched once, at
//! start (node maps about 38 MiB of its own binary and keeps it mapped,
//! though it runs from a few MiB of it). In a memory cgroup at the same
//! budget, as `zpage run --mode kernel` sets up, the kernel reclaims them
//! as it reclaims anonymous pages; zpage, with no accessed bits, cannot tell
//! the cold ones from the hot ones, so it gives them all back and lets the
//! program fault back in what it uses: at most once per interval for each
//! page, from the page cache when the file is still cached there, else from
//! the file, with the kernel's readahead.
//!
//! Which mappings: private (`p`), readable and not writable, backed by a
//! file (an inode), with something resident, nothing anonymous in them and
//! nothing locked. Writable private mappings hold the program's own copies
//! of pages (anonymous memory the kernel could only swap); a mapping with
//! anonymous pages (a relocated segment made read-only after) is left alone
//! for the same reason; shared mappings may be written through. The kernel
//! itself skips the folios other processes map too (`MADV_PAGEOUT` reclaims
//! only what this process maps alone), so the C library's pages, shared
//! with every other process, stay.
//!
//! How: `/proc/self/smaps` read in 4 KiB pieces into stack buffers (no
//! allocation, so zpage's threads may run it whatever the program's
//! allocator), one `madvise` per mapping chosen. The reclaimer asks for a
//! pass at most once per interval and only while the budget is nearly full
//! ([`FilePages::look`]): a program that fits its budget keeps its file
//! pages, as a memory cgroup reclaims nothing below its limit. The pass runs
//! on a thread of its own: node's 634 mappings take about 7 ms to read.
//!
//! What it counts is process-wide ([`file_page_figures`]): passes, and the
//! resident bytes of the mappings given back at each pass (what was there
//! to give back, not what the kernel managed to reclaim).

use crate::sys;
use crate::threads::{spawn_blocking_signals, ZpageThread};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Passes made in this process.
static PASSES: AtomicU64 = AtomicU64::new(0);
/// The most resident bytes one pass found in the mappings it gave back.
static PEAK_PASS_BYTES: AtomicU64 = AtomicU64::new(0);

/// What this process's passes gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilePageFigures {
    /// Passes made.
    pub passes: u64,
    /// The most resident bytes one pass found in the mappings it gave back.
    pub peak_pass_bytes: u64,
}

/// The figures of this process's passes so far.
pub fn file_page_figures() -> FilePageFigures {
    FilePageFigures {
        passes: PASSES.load(Ordering::Relaxed),
        peak_pass_bytes: PEAK_PASS_BYTES.load(Ordering::Relaxed),
    }
}

/// One pass's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassFigures {
    /// Mappings given back.
    pub mappings: u64,
    /// Their resident bytes before the pass.
    pub resident_bytes: u64,
}

/// The reclaimer's schedule of passes. The passes themselves run on a
/// thread of their own ([`Passer`], started at the first): reading a large
/// program's smaps takes milliseconds (node's 634 mappings: about 7 ms),
/// which faults waiting for the reclaimer must not wait out.
#[derive(Debug)]
pub struct FilePages {
    every: Duration,
    next: Instant,
    /// The budget was nearly full at a look since the last pass.
    pressed: bool,
    passer: Option<Passer>,
    /// Set when the passer could not start: no passes.
    off: bool,
}

impl FilePages {
    /// A pass every `every`, the first after one interval.
    pub fn every(every: Duration) -> FilePages {
        FilePages {
            every,
            next: Instant::now() + every,
            pressed: false,
            passer: None,
            off: false,
        }
    }

    /// Asks for a pass when one is due and the budget was nearly full
    /// (`pressed`) at a look since the last pass: a program that fits its
    /// budget keeps its file pages, as a memory cgroup's reclaim runs only
    /// at its limit. Never waits for the pass.
    pub fn look(&mut self, pressed: bool) {
        self.pressed |= pressed;
        if self.off || !self.pressed {
            return;
        }
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.pressed = false;
        self.next = now + self.every;
        if self.passer.is_none() {
            match Passer::start() {
                Ok(passer) => self.passer = Some(passer),
                Err(why) => {
                    self.off = true;
                    eprintln!("zpage: file pages are not given back in this process: {why}");
                    return;
                }
            }
        }
        if let Some(passer) = &self.passer {
            passer.request();
        }
    }
}

/// What the reclaimer and the passer thread share.
#[derive(Debug, Default)]
struct PasserState {
    asked: Mutex<Asked>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Asked {
    pass: bool,
    stop: bool,
}

/// The thread that makes the passes; stopped and joined on drop.
#[derive(Debug)]
struct Passer {
    state: Arc<PasserState>,
    thread: Option<ZpageThread>,
}

impl Passer {
    fn start() -> Result<Passer, String> {
        let state = Arc::new(PasserState::default());
        let theirs = Arc::clone(&state);
        let thread =
            spawn_blocking_signals("zpage-filepages", Box::new(move || run_passes(&theirs)))
                .map_err(|e| format!("its thread could not start: {e}"))?;
        Ok(Passer {
            state,
            thread: Some(thread),
        })
    }

    fn request(&self) {
        self.state.lock().pass = true;
        self.state.wake.notify_one();
    }
}

impl PasserState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Asked> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Passer {
    fn drop(&mut self) {
        self.state.lock().stop = true;
        self.state.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            thread.join();
        }
    }
}

/// The passer thread's body: a pass per request until stopped, or until a
/// pass finds that passes cannot work here (said once).
fn run_passes(state: &PasserState) {
    loop {
        {
            let mut asked = state.lock();
            while !asked.pass && !asked.stop {
                asked = state.wake.wait(asked).unwrap_or_else(|e| e.into_inner());
            }
            if asked.stop {
                return;
            }
            asked.pass = false;
        }
        match give_back_file_pages() {
            Ok(pass) => {
                PASSES.fetch_add(1, Ordering::Relaxed);
                PEAK_PASS_BYTES.fetch_max(pass.resident_bytes, Ordering::Relaxed);
            }
            Err(why) => {
                eprintln!("zpage: file pages are not given back in this process: {why}");
                return;
            }
        }
    }
}

/// One mapping of `/proc/self/smaps` as far as it has been read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    /// Private, readable, not writable, backed by a file.
    eligible: bool,
    rss_kib: u64,
    anonymous_kib: u64,
    locked_kib: u64,
}

impl Mapping {
    /// Reads a header line (`start-end perms offset dev inode [path]`).
    fn from_header(line: &[u8]) -> Option<Mapping> {
        let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let range = fields.next()?;
        let dash = range.iter().position(|&b| b == b'-')?;
        let start = hex(&range[..dash])?;
        let end = hex(&range[dash + 1..])?;
        let perms = fields.next()?;
        let _offset = fields.next()?;
        let _device = fields.next()?;
        let inode = fields.next()?;
        let eligible = perms.len() == 4
            && perms[0] == b'r'
            && perms[1] == b'-'
            && perms[3] == b'p'
            && inode.iter().any(|&b| b != b'0');
        Some(Mapping {
            start,
            end,
            eligible,
            ..Mapping::default()
        })
    }

    /// Reads a field line (`Name:   123 kB`) of the mapping.
    fn read_field(&mut self, line: &[u8]) {
        let field = if line.starts_with(b"Rss:") {
            &mut self.rss_kib
        } else if line.starts_with(b"Anonymous:") {
            &mut self.anonymous_kib
        } else if line.starts_with(b"Locked:") {
            &mut self.locked_kib
        } else {
            return;
        };
        // `Name:   123 kB`; a number that does not read counts as much, so
        // an unreadable `Anonymous:` keeps its mapping.
        *field = std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.split_whitespace().nth(1))
            .map_or(u64::MAX, |kib| kib.parse().unwrap_or(u64::MAX));
    }

    fn wanted_back(&self) -> bool {
        self.eligible
            && self.rss_kib > 0
            && self.anonymous_kib == 0
            && self.locked_kib == 0
            && self.end > self.start
    }
}

fn hex(digits: &[u8]) -> Option<usize> {
    usize::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// The longest line kept whole: a header's fields before the path, and
/// every field line, fit; a longer line (a long path) is cut, which loses
/// only the path.
const LINE_BYTES: usize = 512;

/// Reads `/proc/self/smaps` and hands every mapping, once its fields are
/// read, to `each`. No allocation.
fn for_each_mapping(mut each: impl FnMut(&Mapping)) -> Result<(), String> {
    let mut line = [0u8; LINE_BYTES];
    let mut line_len = 0usize;
    let mut current: Option<Mapping> = None;
    let mut finish_line = |line: &[u8], current: &mut Option<Mapping>| match line.first() {
        Some(b'0'..=b'9' | b'a'..=b'f') => {
            if let Some(done) = current.take() {
                each(&done);
            }
            *current = Mapping::from_header(line);
        }
        Some(_) => {
            if let Some(m) = current.as_mut() {
                m.read_field(line);
            }
        }
        None => {}
    };
    sys::read_in_pieces(b"/proc/self/smaps\0", |piece| {
        for &b in piece {
            if b == b'\n' {
                finish_line(&line[..line_len], &mut current);
                line_len = 0;
            } else if line_len < LINE_BYTES {
                line[line_len] = b;
                line_len += 1;
            }
        }
    })
    .map_err(|e| format!("/proc/self/smaps cannot be read: {e}"))?;
    finish_line(&line[..line_len], &mut current);
    if let Some(done) = current.take() {
        each(&done);
    }
    Ok(())
}

/// One pass: every eligible mapping with resident pages handed to the
/// kernel's reclaim. An error only when smaps cannot be read or the kernel
/// has no `MADV_PAGEOUT`; a mapping that went away meanwhile, or that the
/// kernel refuses (locked since), is skipped.
pub fn give_back_file_pages() -> Result<PassFigures, String> {
    let mut pass = PassFigures::default();
    let mut unsupported = false;
    for_each_mapping(|m| {
        if unsupported || !m.wanted_back() {
            return;
        }
        match sys::madvise_keep(m.start, m.end - m.start, libc::MADV_PAGEOUT) {
            Ok(()) => {
                pass.mappings += 1;
                pass.resident_bytes += m.rss_kib * 1024;
            }
            // EINVAL on a plain file mapping: the kernel does not know the
            // advice (it is older than 5.4).
            Err(e) if e.0 == libc::EINVAL && pass.mappings == 0 => unsupported = true,
            Err(_) => {}
        }
    })?;
    if unsupported && pass.mappings == 0 {
        return Err("this kernel refuses MADV_PAGEOUT (it needs Linux 5.4 or later)".into());
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_choose_private_read_only_file_mappings() {
        let m = Mapping::from_header(
            b"7f8f1aa44000-7f8f1ab9a000 r-xp 00026000 fe:00 326269    /usr/lib/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.eligible),
            (0x7f8f1aa44000, 0x7f8f1ab9a000, true)
        );
        let not = |line: &[u8]| !Mapping::from_header(line).unwrap().eligible;
        assert!(not(b"7f7f1a600000-7f7f1db90000 rw-p 00000000 00:00 0 "));
        assert!(not(b"7f7f1a600000-7f7f1db90000 r--p 00000000 00:00 0 "));
        assert!(not(
            b"555555554000-555555556000 rw-p 00002000 fe:00 12  /usr/bin/x"
        ));
        assert!(not(
            b"7f9069a00000-7f90714b2000 r--s 00000000 fe:00 315140  /lib/modules"
        ));
        assert!(not(
            b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]"
        ));
        assert!(Mapping::from_header(b"Rss: 4 kB").is_none());
    }

    #[test]
    fn fields_decide_what_is_given_back() {
        let mut m = Mapping::from_header(b"1000-3000 r--p 00000000 fe:00 7 /f").unwrap();
        assert!(!m.wanted_back(), "nothing resident");
        m.read_field(b"Rss:                   8 kB");
        assert_eq!(m.rss_kib, 8);
        assert!(m.wanted_back());
        m.read_field(b"Anonymous:             4 kB");
        assert!(!m.wanted_back(), "holds the program's own copies");
        m.anonymous_kib = 0;
        m.read_field(b"Locked:                8 kB");
        assert!(!m.wanted_back(), "locked");
    }
}
