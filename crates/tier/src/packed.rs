//! The packed tier: a file or block device written log-structured.
//!
//! The device is divided into segments of `segment_bytes` (the bound on
//! space, `max_bytes`, is a whole number of them). Sealed blobs (the
//! compressed page and its 16-byte tag, nothing else) are appended to the
//! open segment, so a page takes its compressed size on disk, not 4 KiB. An
//! index in memory maps a reference to the blob's segment, offset and length,
//! and to the page and version its seal is bound to.
//!
//! Freeing a blob only marks it dead. Garbage collection keeps the dead
//! bytes at most [`PackedConfig::garbage_percent`] of the bytes in segments:
//! whenever a put or a free leaves them over it, the closed segment that
//! reclaims the most dead bytes per live byte copied has its live blobs
//! copied into the open segment and is freed. A segment emptied (by frees or
//! by collection) has a hole punched over it in a regular file
//! (`fallocate(FALLOC_FL_PUNCH_HOLE)`), so the file takes on disk what its
//! segments in use hold: about `1 / (1 - garbage_percent)` times the live
//! sealed blobs, 1.07 bytes per compressed byte on real program heaps,
//! however much was rewritten or freed (`TierStats::disk_bytes`). When the
//! open segment is full and no free segment is left, collection takes the
//! segment with the fewest live bytes, copies its live blobs forward into
//! the reserved segment (one is always kept empty for this, so a collection
//! never needs room it does not have), and the emptied segment becomes the
//! new reserve. Blobs are copied sealed, without opening them: their seal
//! binds page and version, not place.
//!
//! Readers copy an index entry under a read lock and read the blob with no
//! lock on the index. A collection may move the blob and reuse its old place
//! meanwhile; the reader then fails the seal check, sees the entry has moved,
//! and reads again from the new place. Authentication is what makes this
//! optimistic read safe: bytes that are not the blob never pass as it.
//!
//! Lock order: the layout (allocation, collection) before the index; the
//! device lock is taken for reading around each system call, and for
//! writing only to open the device.

use crate::health::Health;
use crate::seal::{KeySource, Sealer};
use crate::slot::SlotRef;
use crate::stats::{Counters, TierStats};
use crate::{spin_read, ReadFailure, Tier, TierError, TierRef, TAG_BYTES};
use parking_lot::{Mutex, RwLock};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Where and how a [`PackedTier`] writes.
#[derive(Clone, Debug)]
pub struct PackedConfig {
    /// A new regular file, or a block device (used as it is, from offset 0,
    /// opened exclusively: refused while mounted or a swap area). The file
    /// is created by the tier (mode 0600, never through a symbolic link)
    /// and removed when the tier is dropped: its blobs cannot be opened
    /// without the tier's index, which lives in this process. A path that
    /// exists as a file, a link, a directory, a character device (such as
    /// `/dev/null`), a FIFO or a socket is refused ([`check_path`]).
    pub path: PathBuf,
    /// The bound on the space used, in bytes (rounded down to whole segments).
    pub max_bytes: u64,
    /// Bytes per segment (the unit of garbage collection).
    pub segment_bytes: u64,
    /// The key.
    pub key: KeySource,
    /// How long a tier that failed waits before it tries the device again.
    pub retry_interval: Duration,
    /// Garbage collection keeps the bytes of dead blobs (freed or rewritten
    /// pages not yet copied away) at most this percentage of the bytes in
    /// segments, so the file takes at most about `100 / (100 - garbage_percent)`
    /// times its live sealed blobs on disk. 1 to 50; lower costs more
    /// copying (each collection copies a segment's live blobs to reclaim
    /// its dead ones).
    pub garbage_percent: u8,
    /// What becomes of the file the tier creates (nothing for a device).
    pub file: TierFile,
}

/// What becomes of the file a packed tier creates. Its blobs are sealed
/// with a key that ends with the process, so a file left behind holds
/// nothing anyone can read: only its space, which is why it goes unless
/// kept on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TierFile {
    /// Removed when the tier is dropped (by the process that created it,
    /// if the path still names that file).
    #[default]
    RemovedWhenDropped,
    /// Unlinked as soon as it is created and opened: its space is given
    /// back when the process ends, however it ends (a program run under
    /// `zpage run` never drops its tier, and may be killed).
    UnlinkedWhenOpened,
    /// Left in place.
    Kept,
}

/// The default [`PackedConfig::garbage_percent`]: at most 1/0.95 = 1.053
/// bytes in segments per live sealed byte; with the 16-byte tag of a blob
/// of 1 KiB or more, at most about 1.07 bytes on disk per compressed byte.
const DEFAULT_GARBAGE_PERCENT: u8 = 5;

impl PackedConfig {
    /// A packed tier at `path` bounded to `max_bytes`, with 1 MiB segments,
    /// a per-process key and a one-second retry.
    pub fn new(path: impl Into<PathBuf>, max_bytes: u64) -> PackedConfig {
        PackedConfig {
            path: path.into(),
            max_bytes,
            segment_bytes: 1 << 20,
            key: KeySource::Ephemeral,
            retry_interval: Duration::from_secs(1),
            garbage_percent: DEFAULT_GARBAGE_PERCENT,
            file: TierFile::RemovedWhenDropped,
        }
    }
}

/// What a packed tier's path names, once checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedTarget {
    /// Nothing yet: the tier creates a file there (or, while its directory
    /// is missing, starts down and creates it once the directory appears).
    NewFile,
    /// A block device of this many bytes.
    BlockDevice {
        /// Its size.
        bytes: u64,
    },
}

fn refuse(path: &Path, why: impl std::fmt::Display) -> TierError {
    TierError::InvalidConfig(format!("{}: {why}", path.display()))
}

/// Checks that `path` can hold a packed tier of `max_bytes`: nothing there
/// yet (a new file), or a block device at least that large. Everything
/// else is refused with the reason and the fix: an existing file (never
/// overwritten), a symbolic link (never written through), a directory, a
/// character device (`/dev/null` takes every write and gives nothing
/// back), a FIFO or a socket.
pub fn check_path(path: &Path, max_bytes: u64) -> Result<PackedTarget, TierError> {
    let new_file_instead = "name a path where the tier may create its file (e.g. /var/tmp/zpage.tier) or a block device";
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        // Missing (or not examinable: opening it says why, and the tier
        // retries it).
        Err(_) => return Ok(PackedTarget::NewFile),
    };
    let meta = if meta.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(target) if target.file_type().is_block_device() => target,
            Ok(_) => return Err(refuse(path, format!("is a symbolic link, and the tier never writes a file through one: {new_file_instead}"))),
            Err(e) => return Err(refuse(path, format!("is a symbolic link to nothing ({e}), and the tier never writes a file through one: remove it, or {new_file_instead}"))),
        }
    } else {
        meta
    };
    let kind = meta.file_type();
    if kind.is_block_device() {
        let bytes = std::fs::File::open(path)
            .and_then(|mut device| std::io::Seek::seek(&mut device, std::io::SeekFrom::End(0)))
            .map_err(|e| refuse(path, format!("the block device's size cannot be read: {e}")))?;
        if bytes < max_bytes {
            return Err(refuse(
                path,
                format!("the block device holds {bytes} bytes, less than the {max_bytes} the tier may take: give a larger device or a file"),
            ));
        }
        return Ok(PackedTarget::BlockDevice { bytes });
    }
    let why = if kind.is_file() {
        format!("exists, and the tier never overwrites a file (it creates its own, mode 0600, and removes it at exit): remove it, or {new_file_instead}")
    } else if kind.is_dir() {
        format!(
            "is a directory: name a new file in it, e.g. {}",
            path.join("zpage.tier").display()
        )
    } else if kind.is_char_device() {
        format!("is a character device, which cannot give back what is written to it (/dev/null, /dev/zero): {new_file_instead}")
    } else if kind.is_fifo() {
        format!("is a FIFO, which cannot hold pages: {new_file_instead}")
    } else if kind.is_socket() {
        format!("is a socket, which cannot hold pages: {new_file_instead}")
    } else {
        format!("is not a file or block device: {new_file_instead}")
    };
    Err(refuse(path, why))
}

/// Checks that the file system where `path` would be created has room for
/// `max_bytes` (`statvfs`'s space available to unprivileged users). Done by
/// front ends before they start anything: the tier itself takes a full file
/// system as it comes (writes fail, pages stay in memory). A block device's
/// size is checked by [`check_path`]; a missing directory is not an error
/// here (the tier starts down and retries).
pub fn check_room(path: &Path, max_bytes: u64) -> Result<(), TierError> {
    if check_path(path, max_bytes)? != PackedTarget::NewFile {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(fs) = rustix::fs::statvfs(dir) else {
        return Ok(());
    };
    let available = fs.f_bavail.saturating_mul(fs.f_frsize);
    if available < max_bytes {
        return Err(refuse(
            path,
            format!(
                "the file system of {} has {available} bytes free, less than the {max_bytes} the tier may take: free space there or name a file on a larger file system",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The file a tier created: removed when the tier is dropped, by the
/// process that created it, if the path still names it.
#[derive(Clone, Copy, Debug)]
struct CreatedFile {
    dev: u64,
    ino: u64,
    pid: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    segment: u32,
    offset: u32,
    /// Sealed length (blob and tag).
    sealed_len: u32,
    generation: u32,
    page: u64,
    version: u64,
    live: bool,
}

#[derive(Debug, Default)]
struct Index {
    entries: Vec<Entry>,
    free: Vec<u32>,
}

#[derive(Debug, Default)]
struct Segment {
    /// Bytes appended (live and dead).
    fill: u64,
    /// Bytes of live blobs in it.
    live: u64,
    /// Index slots of the blobs appended to it (some may be dead or moved).
    blobs: Vec<u32>,
}

#[derive(Debug)]
struct Layout {
    segments: Vec<Segment>,
    free: Vec<u32>,
    open: Option<u32>,
    reserve: u32,
    /// Scratch for collection's copies: the victim segment as read, and its
    /// live blobs packed for writing.
    scratch: Vec<u8>,
    packed: Vec<u8>,
    /// The sums of the segments' `fill` and `live`.
    filled: u64,
    live: u64,
}

impl Layout {
    /// Empties `segment` (its blobs are dead or were copied away) and
    /// returns what it held.
    fn empty(&mut self, segment: u32) -> Segment {
        let old = std::mem::take(&mut self.segments[segment as usize]);
        self.filled -= old.fill;
        self.live -= old.live;
        old
    }

    /// Whether dead blobs are more than `percent` of the bytes in segments.
    fn over_garbage(&self, percent: u8) -> bool {
        (self.filled - self.live) * 100 > self.filled * u64::from(percent)
    }
}

/// A log-structured, sealed tier on a file or device.
#[derive(Debug)]
pub struct PackedTier {
    config: PackedConfig,
    describe: String,
    sealer: Sealer,
    index: RwLock<Index>,
    layout: Mutex<Layout>,
    device: RwLock<Option<File>>,
    /// A file the tier creates (else a block device).
    regular: bool,
    /// The file, once created.
    created: Mutex<Option<CreatedFile>>,
    health: Health,
    deleted_reported: AtomicBool,
    counters: Counters,
    /// Bumped, under the index's write lock, each time collection repoints
    /// blobs: a read whose blob failed while this moved may have read a
    /// place the blob had left, and tries again (see `get`).
    relocations: AtomicU64,
}

/// Reads exactly `buf.len()` bytes at `offset` with `pread` (async-signal-safe;
/// allocates nothing).
fn read_exact_at(file: &File, buf: &mut [u8], mut offset: u64) -> Result<(), ReadFailure> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset) {
            Ok(0) => return Err(ReadFailure::Truncated),
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(ReadFailure::Io {
                    // 0: the error carried no errno.
                    errno: e.raw_os_error().unwrap_or(0),
                });
            }
        }
    }
    Ok(())
}

impl PackedTier {
    /// A packed tier. A bad configuration is an error, and so is a path
    /// that cannot hold pages ([`check_path`]) or a block device in use; a
    /// file that cannot be created (its directory missing, say) is not: the
    /// tier starts down, says why on standard error, and is retried on later
    /// writes (pages stay in memory meanwhile).
    pub fn new(config: PackedConfig) -> Result<PackedTier, TierError> {
        if config.segment_bytes < 64 * 1024 || config.segment_bytes > u64::from(u32::MAX) {
            return Err(TierError::InvalidConfig(format!(
                "segment_bytes is {}: give 64 KiB to 4 GiB",
                config.segment_bytes
            )));
        }
        if !(1..=50).contains(&config.garbage_percent) {
            return Err(TierError::InvalidConfig(format!(
                "garbage_percent is {}: give 1 to 50",
                config.garbage_percent
            )));
        }
        let segments = config.max_bytes / config.segment_bytes;
        if segments < 2 || segments > u64::from(u32::MAX) {
            return Err(TierError::InvalidConfig(format!(
                "max_bytes {} holds {segments} segments of {} bytes: give room for at least 2 (one is kept free for garbage collection)",
                config.max_bytes, config.segment_bytes
            )));
        }
        let regular = check_path(&config.path, config.max_bytes)? == PackedTarget::NewFile;
        let describe = match regular {
            true => format!("packed file {}", config.path.display()),
            false => format!("packed device {}", config.path.display()),
        };
        let tier = PackedTier {
            sealer: Sealer::new(&config.key)?,
            health: Health::new(&describe, config.retry_interval),
            describe,
            index: RwLock::new(Index::default()),
            layout: Mutex::new(Layout {
                segments: (0..segments).map(|_| Segment::default()).collect(),
                // Handed out from the front (segment 0 first), so a file
                // grows only as far as it is used; the last is the reserve.
                free: (0..segments as u32 - 1).rev().collect(),
                open: None,
                reserve: segments as u32 - 1,
                scratch: Vec::new(),
                packed: Vec::new(),
                filled: 0,
                live: 0,
            }),
            device: RwLock::new(None),
            regular,
            created: Mutex::new(None),
            deleted_reported: AtomicBool::new(false),
            relocations: AtomicU64::new(0),
            counters: Counters::default(),
            config,
        };
        if let Err(error) = tier.open_device() {
            if let Some(refusal) = tier.refusal(&error) {
                return Err(refusal);
            }
            tier.health.failed(&error);
        }
        Ok(tier)
    }

    /// A failure to open that retrying will not mend, as the error to
    /// return: the path became a file or link since it was checked, or the
    /// block device is in use.
    fn refusal(&self, error: &TierError) -> Option<TierError> {
        let TierError::Io { source, .. } = error else {
            return None;
        };
        let why = match rustix::io::Errno::from_io_error(source)? {
            rustix::io::Errno::EXIST | rustix::io::Errno::LOOP => {
                "appeared while the tier was being made; the tier never overwrites a file or writes through a link: name a new path"
            }
            rustix::io::Errno::BUSY => {
                "is in use (mounted, a swap area, or held open exclusively by another program): name a free device or a new file"
            }
            _ => return None,
        };
        Some(refuse(&self.config.path, why))
    }

    /// Opens the device, or creates the file: a new file only (`O_EXCL`),
    /// never through a symbolic link, private to this user; a block device
    /// exclusively (`O_EXCL` without `O_CREAT`: `EBUSY` while it is mounted
    /// or a swap area).
    fn open_device(&self) -> Result<(), TierError> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        if self.regular {
            options
                .create_new(true)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        } else {
            options.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
        }
        let file = options
            .open(&self.config.path)
            .map_err(|source| self.io_error("open", source))?;
        if self.regular {
            match self.config.file {
                TierFile::RemovedWhenDropped => {
                    if let Ok(meta) = file.metadata() {
                        *self.created.lock() = Some(CreatedFile {
                            dev: meta.dev(),
                            ino: meta.ino(),
                            pid: std::process::id(),
                        });
                    }
                }
                TierFile::UnlinkedWhenOpened => {
                    // Just created with O_EXCL and without following links,
                    // so the path names this file. Unlinked on purpose: not
                    // the deletion `check_deleted` reports.
                    self.deleted_reported.store(true, Relaxed);
                    std::fs::remove_file(&self.config.path)
                        .map_err(|source| self.io_error("unlink", source))?;
                }
                TierFile::Kept => {}
            }
        }
        *crate::spin_write(&self.device) = Some(file);
        Ok(())
    }

    fn io_error(&self, action: &'static str, source: std::io::Error) -> TierError {
        TierError::Io {
            tier: self.describe.clone(),
            action,
            source,
        }
    }

    fn segment_offset(&self, segment: u32, offset: u64) -> u64 {
        u64::from(segment) * self.config.segment_bytes + offset
    }

    fn write_at(&self, bytes: &[u8], at: u64) -> Result<(), TierError> {
        let device = self.device.read();
        let file = device.as_ref().ok_or_else(|| TierError::Unavailable {
            tier: self.describe.clone(),
            cause: "the device is not open".into(),
            retry_ms: self.config.retry_interval.as_millis() as u64,
        })?;
        file.write_all_at(bytes, at)
            .map_err(|source| self.io_error("write", source))
    }

    fn read_at(&self, bytes: &mut [u8], at: u64) -> Result<(), ReadFailure> {
        let device = spin_read(&self.device);
        let file = device.as_ref().ok_or(ReadFailure::Unavailable)?;
        read_exact_at(file, bytes, at)
    }

    /// Finds room for `len` bytes: the open segment, a free one, or one
    /// emptied by collection. Returns (segment, offset).
    fn place(&self, layout: &mut Layout, len: u64) -> Result<(u32, u64), TierError> {
        if let Some(open) = layout.open {
            let fill = layout.segments[open as usize].fill;
            if fill + len <= self.config.segment_bytes {
                return Ok((open, fill));
            }
        }
        if let Some(free) = layout.free.pop() {
            layout.open = Some(free);
            return Ok((free, 0));
        }
        self.collect(layout, len)?;
        let open = layout.open.expect("collection leaves an open segment");
        Ok((open, layout.segments[open as usize].fill))
    }

    /// Garbage collection: copies the live blobs of the segment with the
    /// fewest live bytes into the reserve, which becomes the open segment;
    /// the emptied segment becomes the reserve. Fails when even that would
    /// not leave room for `len` more bytes.
    fn collect(&self, layout: &mut Layout, len: u64) -> Result<(), TierError> {
        let reserve = layout.reserve;
        let victim = layout
            .segments
            .iter()
            .enumerate()
            .filter(|&(i, s)| i as u32 != reserve && s.fill > 0)
            .min_by_key(|(_, s)| s.live)
            .map(|(i, _)| i as u32);
        let full = || TierError::Full {
            tier: self.describe.clone(),
            capacity_bytes: self.capacity_bytes(),
        };
        let Some(victim) = victim else {
            return Err(full());
        };
        if layout.segments[victim as usize].live + len > self.config.segment_bytes {
            return Err(full());
        }
        layout.empty(reserve);
        self.copy_live(layout, victim, reserve)?;
        layout.open = Some(reserve);
        layout.reserve = victim;
        Ok(())
    }

    /// Copies the live blobs of `victim` to the end of `dest` (sealed, as
    /// they are), repoints the index, empties `victim` and gives its space
    /// back to the file system. On error nothing
    /// is repointed and `dest`'s fill is unchanged (the partial copies are
    /// garbage the next append overwrites).
    fn copy_live(&self, layout: &mut Layout, victim: u32, dest: u32) -> Result<(), TierError> {
        let mut blobs = std::mem::take(&mut layout.segments[victim as usize].blobs);
        // A slot freed and reused within one segment is listed twice.
        blobs.sort_unstable();
        blobs.dedup();
        let live_entries: Vec<(u32, Entry)> = {
            let index = self.index.read();
            blobs
                .iter()
                .map(|&slot| (slot, index.entries[slot as usize]))
                .filter(|(_, entry)| entry.live && entry.segment == victim)
                .collect()
        };
        // One read of the victim up to its last live blob and one write of
        // the live blobs packed end to end: a segment holds hundreds of
        // blobs, and a system call each would cost more than the copying.
        // (Past the last live blob the file may end early: a write that
        // failed there took the space but left no bytes.)
        let extent = live_entries
            .iter()
            .map(|(_, e)| u64::from(e.offset) + u64::from(e.sealed_len))
            .max()
            .unwrap_or(0);
        let start = layout.segments[dest as usize].fill;
        let mut fill = start;
        let mut moved = Vec::with_capacity(live_entries.len());
        let mut scratch = std::mem::take(&mut layout.scratch);
        let mut packed = std::mem::take(&mut layout.packed);
        packed.clear();
        scratch.resize(extent as usize, 0);
        let mut result = self
            .read_at(&mut scratch, self.segment_offset(victim, 0))
            .map_err(|failure| {
                self.io_error(
                    "read (garbage collection)",
                    std::io::Error::other(failure.cause()),
                )
            });
        if result.is_ok() {
            for &(slot, entry) in &live_entries {
                let len = u64::from(entry.sealed_len);
                if fill + len > self.config.segment_bytes {
                    result = Err(TierError::Full {
                        tier: self.describe.clone(),
                        capacity_bytes: self.capacity_bytes(),
                    });
                    break;
                }
                let at = entry.offset as usize;
                packed.extend_from_slice(&scratch[at..at + entry.sealed_len as usize]);
                moved.push((slot, entry, fill));
                fill += len;
            }
        }
        if result.is_ok() && !packed.is_empty() {
            result = self.write_at(&packed, self.segment_offset(dest, start));
        }
        layout.scratch = scratch;
        layout.packed = packed;
        if let Err(error) = result {
            layout.segments[victim as usize].blobs = blobs;
            return Err(error);
        }
        let mut live = 0;
        let mut kept = Vec::with_capacity(moved.len());
        {
            let mut index = crate::spin_write(&self.index);
            for (slot, seen, offset) in moved {
                let entry = &mut index.entries[slot as usize];
                // Freed while it was copied: leave the copy as dead bytes.
                if entry.live && entry.generation == seen.generation && entry.segment == victim {
                    entry.segment = dest;
                    entry.offset = offset as u32;
                    live += u64::from(entry.sealed_len);
                    kept.push(slot);
                    Counters::add(&self.counters.gc_moved_blobs, 1);
                    Counters::add(&self.counters.gc_moved_bytes, u64::from(entry.sealed_len));
                }
            }
            // Before the lock goes and before `victim` can be reused.
            self.relocations.fetch_add(1, SeqCst);
        }
        let dest_segment = &mut layout.segments[dest as usize];
        layout.filled += fill - dest_segment.fill;
        layout.live += live;
        dest_segment.fill = fill;
        dest_segment.live += live;
        dest_segment.blobs.extend(kept);
        layout.empty(victim);
        self.release(victim);
        Counters::add(&self.counters.gc_runs, 1);
        Ok(())
    }

    /// Gives an emptied segment's blocks back to the file system (a hole
    /// punched over it; the file keeps its size), so the file takes on disk
    /// what its segments in use hold. A device keeps its blocks: nothing
    /// is counted on it but the segments' fill.
    fn release(&self, segment: u32) {
        if !self.regular {
            return;
        }
        let device = self.device.read();
        let Some(file) = device.as_ref() else { return };
        let punched = rustix::fs::fallocate(
            file,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            self.segment_offset(segment, 0),
            self.config.segment_bytes,
        );
        match punched {
            Ok(()) => Counters::add(&self.counters.punched_segments, 1),
            // The blocks stay allocated and are overwritten when the
            // segment is used again: space, not data, is what is lost.
            Err(_) => Counters::add(&self.counters.punch_failures, 1),
        }
    }

    /// Collection ahead of need: copies the live blobs of the closed
    /// segment where that reclaims the most dead bytes per byte copied into
    /// the open segment (a free one is opened when the open one lacks room)
    /// and frees it. False when there was nothing worth doing or no room to
    /// do it.
    fn compact_one(&self, layout: &mut Layout) -> bool {
        let open = layout.open;
        let reserve = layout.reserve;
        // live/dead, compared without dividing: the lowest copies least per
        // byte reclaimed.
        let Some(victim) = (0..)
            .zip(&layout.segments)
            .filter(|&(i, s)| Some(i) != open && i != reserve && s.live < s.fill)
            .min_by(|(_, a), (_, b)| {
                let cost = |s: &Segment, other: &Segment| {
                    u128::from(s.live) * u128::from(other.fill - other.live)
                };
                cost(a, b).cmp(&cost(b, a))
            })
            .map(|(i, _)| i)
        else {
            return false;
        };
        let need = layout.segments[victim as usize].live;
        let dest = match open {
            Some(o) if layout.segments[o as usize].fill + need <= self.config.segment_bytes => o,
            _ => match layout.free.pop() {
                Some(free) => {
                    layout.open = Some(free);
                    free
                }
                None => return false,
            },
        };
        if self.copy_live(layout, victim, dest).is_err() {
            return false;
        }
        layout.free.push(victim);
        true
    }

    /// Collection as the log is written and freed, one segment at a time
    /// while dead blobs are over `garbage_percent`, so their share stays
    /// bounded at every moment, however often `maintain` runs.
    fn collect_if_over(&self, layout: &mut Layout) {
        if layout.over_garbage(self.config.garbage_percent) {
            self.compact_one(layout);
        }
    }

    fn capacity_bytes(&self) -> u64 {
        (self.config.max_bytes / self.config.segment_bytes) * self.config.segment_bytes
    }

    /// Where the blob `tier_ref` names lies on the device (offset, sealed
    /// length): for tamper tests.
    #[doc(hidden)]
    pub fn location_for_test(&self, tier_ref: TierRef) -> Option<(u64, usize)> {
        let slot = SlotRef::decode(tier_ref).slot;
        let entry = *self.index.read().entries.get(slot)?;
        entry.live.then(|| {
            (
                self.segment_offset(entry.segment, u64::from(entry.offset)),
                entry.sealed_len as usize,
            )
        })
    }

    /// Replaces the open device with `file`: for failure tests (a file opened
    /// read-only makes every write fail, `/dev/full` makes them fail with
    /// `ENOSPC`, a write-only file makes reads fail).
    #[doc(hidden)]
    pub fn replace_device_for_test(&self, file: File) {
        *crate::spin_write(&self.device) = Some(file);
    }

    fn try_put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError> {
        self.health.may_try()?;
        if self.device.read().is_none() {
            self.open_device()?;
        }
        let mut sealed = Vec::with_capacity(blob.len() + TAG_BYTES);
        let version = self.sealer.seal(page, blob, &mut sealed)?;
        let len = sealed.len() as u64;
        let mut layout = self.layout.lock();
        let (segment, offset) = self.place(&mut layout, len)?;
        // The space is taken whether or not the write succeeds: a failed
        // write leaves dead bytes, never a blob the index points at.
        debug_assert_eq!(layout.segments[segment as usize].fill, offset);
        layout.segments[segment as usize].fill = offset + len;
        layout.filled += len;
        self.write_at(&sealed, self.segment_offset(segment, offset))?;
        let slot = {
            let mut index = crate::spin_write(&self.index);
            let slot = match index.free.pop() {
                Some(slot) => slot,
                None => {
                    index.entries.push(Entry::default());
                    (index.entries.len() - 1) as u32
                }
            };
            let entry = &mut index.entries[slot as usize];
            *entry = Entry {
                segment,
                offset: offset as u32,
                sealed_len: len as u32,
                generation: entry.generation,
                page,
                version,
                live: true,
            };
            (slot, entry.generation)
        };
        let seg = &mut layout.segments[segment as usize];
        seg.live += len;
        seg.blobs.push(slot.0);
        layout.live += len;
        self.collect_if_over(&mut layout);
        Ok(SlotRef::encode(slot.0, slot.1))
    }

    /// The space the file takes on its file system (`st_blocks` × 512, as
    /// `du` counts it); `None` for a device, or while the file is not open.
    fn disk_bytes(&self) -> Option<u64> {
        if !self.regular {
            return None;
        }
        let device = self.device.read();
        let meta = device.as_ref()?.metadata().ok()?;
        Some(meta.blocks() * 512)
    }

    /// Notices a regular file that was deleted under us: its pages stay
    /// readable (the descriptor keeps the file), but its space is no longer
    /// visible to anyone, so it is said once.
    fn check_deleted(&self) {
        let device = self.device.read();
        let Some(file) = device.as_ref() else { return };
        if let Ok(meta) = file.metadata() {
            if meta.nlink() == 0 && !self.deleted_reported.swap(true, Relaxed) {
                eprintln!(
                    "zpage: tier {} was deleted; its pages stay readable through the open descriptor and its space is freed when the process ends",
                    self.describe
                );
            }
        }
    }
}

/// Reads of a blob while collections keep repointing blobs, before `get`
/// gives up (each retry follows a collection that ran during the read).
const GET_TRIES_WHILE_MOVING: usize = 64;

impl Tier for PackedTier {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError> {
        self.counters
            .accounted_put(&self.health, blob, || self.try_put(page, blob))
    }

    fn get(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure> {
        let started = Instant::now();
        let named = SlotRef::decode(tier_ref);
        let mut result = Err(ReadFailure::Stale);
        // Collection may repoint the blob after our look at the index and
        // reuse the place it left before our read: the read then fails. A
        // failure while no collection repointed anything is the blob's own;
        // otherwise we look again. (Comparing the blob's place before and
        // after is not enough: moved to and fro between two segments, a
        // blob comes back to the same offset.)
        for _ in 0..GET_TRIES_WHILE_MOVING {
            let relocations = self.relocations.load(SeqCst);
            let entry = {
                let index = spin_read(&self.index);
                match index.entries.get(named.slot) {
                    Some(e) if e.live && named.is_current(e.generation) => *e,
                    _ => {
                        result = Err(ReadFailure::Stale);
                        break;
                    }
                }
            };
            if entry.page != page {
                result = Err(ReadFailure::Stale);
                break;
            }
            let Some(dst) = buf.get_mut(..entry.sealed_len as usize) else {
                result = Err(ReadFailure::BufferTooSmall);
                break;
            };
            let at = self.segment_offset(entry.segment, u64::from(entry.offset));
            result = self
                .read_at(dst, at)
                .and_then(|()| self.sealer.open(page, entry.version, dst));
            if result.is_ok() {
                break;
            }
            if self.relocations.load(SeqCst) == relocations {
                // Freed meanwhile (its segment emptied and reused): stale,
                // not corrupt.
                let index = spin_read(&self.index);
                if !index
                    .entries
                    .get(named.slot)
                    .is_some_and(|e| e.live && named.is_current(e.generation))
                {
                    result = Err(ReadFailure::Stale);
                }
                break;
            }
        }
        match result {
            Ok(_) => self.counters.count_get(started.elapsed().as_nanos() as u64),
            Err(failure) => self.counters.count_read_failure(failure),
        }
        result
    }

    fn free(&self, tier_ref: TierRef) {
        let named = SlotRef::decode(tier_ref);
        let mut layout = self.layout.lock();
        let freed = {
            let mut index = crate::spin_write(&self.index);
            let Some(entry) = index.entries.get_mut(named.slot) else {
                return;
            };
            if !entry.live || !named.is_current(entry.generation) {
                return;
            }
            entry.live = false;
            entry.generation = entry.generation.wrapping_add(1);
            let freed = *entry;
            index.free.push(named.slot as u32);
            freed
        };
        let open = layout.open;
        let seg = &mut layout.segments[freed.segment as usize];
        seg.live -= u64::from(freed.sealed_len);
        let emptied = seg.live == 0 && open != Some(freed.segment);
        layout.live -= u64::from(freed.sealed_len);
        // An emptied closed segment is free again at once (no copy needed).
        if emptied {
            layout.empty(freed.segment);
            self.release(freed.segment);
            layout.free.push(freed.segment);
        } else {
            self.collect_if_over(&mut layout);
        }
        drop(layout);
        self.counters.count_free(u64::from(freed.sealed_len));
    }

    fn stats(&self) -> TierStats {
        let (backing_bytes, log_end_bytes) = {
            let layout = self.layout.lock();
            let log_end = (0..)
                .zip(&layout.segments)
                .filter(|(_, s)| s.fill > 0)
                .map(|(i, s)| self.segment_offset(i, s.fill))
                .max()
                .unwrap_or(0);
            (layout.filled, log_end)
        };
        let disk_bytes = self.disk_bytes();
        let down_cause = self.health.down_cause();
        TierStats {
            backing_bytes,
            capacity_bytes: self.capacity_bytes(),
            disk_bytes,
            log_end_bytes: Some(log_end_bytes),
            available: down_cause.is_none(),
            down_cause,
            ..TierStats::from_counters(&self.counters)
        }
    }

    fn reads_are_async_signal_safe(&self) -> bool {
        true
    }

    /// Notices a deleted file, and collects garbage ahead of need: while
    /// dead blobs are more than `garbage_percent` of the bytes in segments,
    /// the closed segment cheapest to reclaim is copied into the open one
    /// and freed (a few segments a call, so one call stays short).
    fn maintain(&self) {
        self.check_deleted();
        for _ in 0..4 {
            let mut layout = self.layout.lock();
            debug_assert_eq!(
                (layout.filled, layout.live),
                layout
                    .segments
                    .iter()
                    .fold((0, 0), |(f, l), s| (f + s.fill, l + s.live))
            );
            if !layout.over_garbage(self.config.garbage_percent) || !self.compact_one(&mut layout) {
                return;
            }
        }
    }
}

impl Drop for PackedTier {
    /// Removes the file the tier created, when this is the process that
    /// created it (a forked child dropping its copy leaves the parent's
    /// file alone) and the path still names that file.
    fn drop(&mut self) {
        let Some(created) = *self.created.lock() else {
            return;
        };
        if created.pid != std::process::id() {
            return;
        }
        if let Ok(meta) = std::fs::symlink_metadata(&self.config.path) {
            if meta.dev() == created.dev && meta.ino() == created.ino {
                let _ = std::fs::remove_file(&self.config.path);
            }
        }
    }
}
