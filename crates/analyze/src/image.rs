//! Memory to analyse: raw image files, and the resident anonymous pages of
//! live processes read through `/proc/PID/{maps,pagemap,mem}`.

use crate::{AnalyzeError, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read as _};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use zpage_codec::{Page, PAGE_SIZE};

/// Where an image's pages came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A raw dump of whole pages.
    File {
        /// The file.
        path: PathBuf,
        /// Trailing bytes that did not make a whole page and were not analysed.
        skipped_bytes: u64,
    },
    /// A live process.
    Process {
        /// Its PID.
        pid: u32,
        /// Its command name (`/proc/PID/comm`).
        command: String,
        /// Private writable mappings read.
        mappings: usize,
        /// Resident pages that could not be read (the process changed meanwhile).
        unreadable_pages: u64,
    },
}

/// Pages to analyse, contiguous in memory, with where they came from.
#[derive(Clone, Debug)]
pub struct MemoryImage {
    source: Source,
    data: Vec<u8>,
}

impl MemoryImage {
    /// An image made of these pages (generated data, tests).
    pub fn from_pages(source: Source, pages: &[Page]) -> Self {
        Self {
            source,
            data: pages.as_flattened().to_vec(),
        }
    }

    /// Reads a raw image file. A size that is not a multiple of 4096 is analysed
    /// in whole pages and the rest reported in `skipped_bytes`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let unreadable = |source| AnalyzeError::ImageUnreadable {
            path: path.to_path_buf(),
            source,
        };
        let mut data = std::fs::read(path).map_err(unreadable)?;
        let bytes = data.len() as u64;
        let whole = data.len() / PAGE_SIZE * PAGE_SIZE;
        if whole == 0 {
            return Err(AnalyzeError::ImageTooSmall {
                path: path.to_path_buf(),
                bytes,
            });
        }
        data.truncate(whole);
        Ok(Self {
            source: Source::File {
                path: path.to_path_buf(),
                skipped_bytes: bytes - whole as u64,
            },
            data,
        })
    }

    /// Where the pages came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// A short name for tables: the file name, or `command[pid]`.
    pub fn label(&self) -> String {
        label_of(&self.source)
    }

    /// The pages.
    pub fn pages(&self) -> &[Page] {
        self.data.as_chunks::<PAGE_SIZE>().0
    }

    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.data.len() / PAGE_SIZE
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Writes the pages as a raw image (for `zpage bench --image` and later
    /// analysis) into a new private file: see [`create_image_file`].
    pub fn save(&self, path: &Path) -> Result<()> {
        write_new_image(path, |file| {
            use std::io::Write as _;
            file.write_all(&self.data)
        })
    }

    /// Concatenates images (analysing several files as one memory).
    pub fn concat(images: Vec<MemoryImage>) -> Option<MemoryImage> {
        let mut images = images.into_iter();
        let mut first = images.next()?;
        for image in images {
            first.data.extend_from_slice(&image.data);
        }
        Some(first)
    }
}

/// Pages read a chunk at a time, so analysing any amount of memory takes a
/// bounded amount of it: a file, a live process, or pages already in memory.
pub trait PageSource {
    /// Where the pages come from (as the report shows it).
    fn source(&self) -> Source;

    /// A short name for tables: the file name, or `command[pid]`.
    fn label(&self) -> String;

    /// Pages the source holds (for a process, those resident when opened;
    /// it may yield fewer if the process changes meanwhile).
    fn total_pages(&self) -> u64;

    /// Appends up to `max` pages to `pages`; returns how many (0 at the end).
    fn next_chunk(&mut self, pages: &mut Vec<Page>, max: usize) -> Result<usize>;

    /// Starts over from the first page (each codec and zram algorithm reads
    /// the source once).
    fn rewind(&mut self) -> Result<()>;

    /// The label of this source (or of the part of it) whose pages can be
    /// read only once (a pipe or a socket); `None` when it can be read again.
    fn read_once(&self) -> Option<String> {
        None
    }
}

/// Pages already in memory (generated data, tests).
#[derive(Debug)]
pub struct PagesSource<'a> {
    pages: &'a [Page],
    next: usize,
    source: Source,
}

impl<'a> PagesSource<'a> {
    /// A source over `pages`.
    pub fn new(pages: &'a [Page], source: Source) -> Self {
        Self {
            pages,
            next: 0,
            source,
        }
    }
}

impl PageSource for PagesSource<'_> {
    fn source(&self) -> Source {
        self.source.clone()
    }
    fn label(&self) -> String {
        label_of(&self.source)
    }
    fn total_pages(&self) -> u64 {
        self.pages.len() as u64
    }
    fn next_chunk(&mut self, pages: &mut Vec<Page>, max: usize) -> Result<usize> {
        let end = (self.next + max).min(self.pages.len());
        pages.extend_from_slice(&self.pages[self.next..end]);
        let n = end - self.next;
        self.next = end;
        Ok(n)
    }
    fn rewind(&mut self) -> Result<()> {
        self.next = 0;
        Ok(())
    }
}

fn label_of(source: &Source) -> String {
    match source {
        Source::File { path, .. } => path.display().to_string(),
        Source::Process { pid, command, .. } => format!("{command}[{pid}]"),
    }
}

/// A raw image read from a file in chunks. Only regular files are read
/// whole; devices and pipes (`/dev/zero` has no end) need a size.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    file: File,
    pages: u64,
    skipped_bytes: u64,
    next: u64,
    /// A regular file, read at offsets; anything else is read in sequence.
    regular: bool,
    /// A pipe or socket: what was read is gone.
    read_once: bool,
}

/// What a path that is not a regular file is, for messages.
fn describe_file_type(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

impl FileSource {
    /// Opens `path`; `size` caps what is read (required for anything but a
    /// regular file). Never blocks: a FIFO without a writer is opened
    /// non-blocking, looked at, and refused without `size`.
    pub fn open(path: &Path, size: Option<u64>) -> Result<Self> {
        let unreadable = |source| AnalyzeError::ImageUnreadable {
            path: path.to_path_buf(),
            source,
        };
        // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if meta.is_dir() {
            return Err(AnalyzeError::Invalid(format!(
                "{} is a directory: give a memory image file (a raw dump of whole pages)",
                path.display()
            )));
        }
        let regular = meta.is_file();
        let bytes = match (regular, size) {
            (true, Some(size)) => meta.len().min(size),
            (true, None) => meta.len(),
            (false, Some(size)) => size,
            (false, None) => {
                return Err(AnalyzeError::NotARegularFile {
                    path: path.to_path_buf(),
                    kind: describe_file_type(meta.file_type()),
                })
            }
        };
        // Reads block as usual from here on (a pipe waits for its writer's bytes).
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| unreadable(e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| unreadable(e.into()))?;
        let whole = bytes / PAGE_SIZE as u64;
        if whole == 0 {
            return Err(AnalyzeError::ImageTooSmall {
                path: path.to_path_buf(),
                bytes,
            });
        }
        let file_type = meta.file_type();
        Ok(Self {
            path: path.to_path_buf(),
            file,
            pages: whole,
            skipped_bytes: if regular {
                meta.len().min(bytes) - whole * PAGE_SIZE as u64
            } else {
                0
            },
            next: 0,
            regular,
            read_once: file_type.is_fifo() || file_type.is_socket(),
        })
    }

    /// Fills `buffer` from a device or pipe, in sequence; `offset` is where it starts in the image.
    fn read_sequentially(&mut self, buffer: &mut [u8], offset: u64) -> Result<()> {
        let mut filled = 0;
        while filled < buffer.len() {
            match self.file.read(&mut buffer[filled..]) {
                Ok(0) => {
                    return Err(AnalyzeError::ImageEndedEarly {
                        path: self.path.clone(),
                        read_bytes: offset + filled as u64,
                        size: self.pages * PAGE_SIZE as u64,
                    })
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(AnalyzeError::ImageUnreadable {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

impl PageSource for FileSource {
    fn source(&self) -> Source {
        Source::File {
            path: self.path.clone(),
            skipped_bytes: self.skipped_bytes,
        }
    }
    fn label(&self) -> String {
        self.path.display().to_string()
    }
    fn total_pages(&self) -> u64 {
        self.pages
    }
    fn next_chunk(&mut self, pages: &mut Vec<Page>, max: usize) -> Result<usize> {
        let n = (self.pages - self.next).min(max as u64) as usize;
        let first = pages.len();
        pages.resize(first + n, [0u8; PAGE_SIZE]);
        let buffer = pages[first..].as_flattened_mut();
        let offset = self.next * PAGE_SIZE as u64;
        if self.regular {
            self.file.read_exact_at(buffer, offset).map_err(|source| {
                AnalyzeError::ImageUnreadable {
                    path: self.path.clone(),
                    source,
                }
            })?;
        } else {
            // Devices and pipes do not seek: read sequentially from where we are.
            self.read_sequentially(buffer, offset)?;
        }
        self.next += n as u64;
        Ok(n)
    }
    fn rewind(&mut self) -> Result<()> {
        if self.next == 0 {
            return Ok(());
        }
        if self.read_once {
            return Err(AnalyzeError::ReadOnce {
                label: self.label(),
            });
        }
        let reopened = Self::open(&self.path, Some(self.pages * PAGE_SIZE as u64))?;
        self.file = reopened.file;
        self.next = 0;
        Ok(())
    }
    fn read_once(&self) -> Option<String> {
        self.read_once.then(|| self.label())
    }
}

/// The resident private anonymous pages of a live process: where they are
/// is found when it is opened (`PAGEMAP_SCAN`, or `/proc/PID/pagemap` on
/// older kernels), their bytes are read from `/proc/PID/mem` a chunk at a time.
#[derive(Debug)]
pub struct ProcessSource {
    pid: u32,
    command: String,
    mappings: usize,
    mem: File,
    /// Address ranges of resident anonymous pages, at most `max_pages` pages in all.
    ranges: Vec<(u64, u64)>,
    total: u64,
    /// Next range, and the address to read next in it.
    range: usize,
    address: u64,
    unreadable_pages: u64,
}

impl ProcessSource {
    /// Opens process `pid`; at most `max_pages` pages are read.
    pub fn open(pid: u32, max_pages: Option<u64>) -> Result<Self> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let command = process_with_user_memory(pid)?;
        let read_text = |name: &str| {
            let path = proc_dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| proc_error(pid, path, e))
        };
        let open = |name: &str| {
            let path = proc_dir.join(name);
            File::open(&path).map_err(|e| proc_error(pid, path, e))
        };
        let mappings = private_writable_mappings(&read_text("maps")?);
        let pagemap = open("pagemap")?;
        let mem = open("mem")?;
        let limit = max_pages.unwrap_or(u64::MAX);
        let pagemap_error = |e| proc_error(pid, proc_dir.join("pagemap"), e);
        let mut ranges = Vec::new();
        let mut total = 0u64;
        for mapping in &mappings {
            if total >= limit {
                break;
            }
            let found = match zpage_kernel::resident_anonymous_ranges(
                &pagemap,
                mapping.start,
                mapping.end,
                limit - total,
            )
            .map_err(pagemap_error)?
            {
                Some(found) => found,
                None => {
                    ranges_from_pagemap(&pagemap, mapping, limit - total).map_err(pagemap_error)?
                }
            };
            for (start, end) in found {
                let pages = ((end - start) / PAGE_SIZE as u64).min(limit - total);
                if pages > 0 {
                    ranges.push((start, start + pages * PAGE_SIZE as u64));
                    total += pages;
                }
            }
        }
        Ok(Self {
            pid,
            command,
            mappings: mappings.len(),
            mem,
            ranges,
            total,
            range: 0,
            address: 0,
            unreadable_pages: 0,
        })
    }
}

/// Resident anonymous ranges of `mapping` from pagemap entries (kernels
/// without `PAGEMAP_SCAN`), at most `max_pages` pages.
fn ranges_from_pagemap(
    pagemap: &File,
    mapping: &Mapping,
    max_pages: u64,
) -> std::io::Result<Vec<(u64, u64)>> {
    let mut entries = vec![0u8; PAGEMAP_BATCH * 8];
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut pages = 0u64;
    let mut address = mapping.start;
    while address < mapping.end && pages < max_pages {
        let batch = (((mapping.end - address) / PAGE_SIZE as u64) as usize).min(PAGEMAP_BATCH);
        let read = pagemap.read_at(&mut entries[..batch * 8], address / PAGE_SIZE as u64 * 8)? / 8;
        if read == 0 {
            break;
        }
        for (i, entry) in entries[..read * 8].chunks_exact(8).enumerate() {
            if !is_resident_anonymous(entry) || pages >= max_pages {
                continue;
            }
            let page = address + (i * PAGE_SIZE) as u64;
            match ranges.last_mut() {
                Some((_, end)) if *end == page => *end += PAGE_SIZE as u64,
                _ => ranges.push((page, page + PAGE_SIZE as u64)),
            }
            pages += 1;
        }
        address += (read * PAGE_SIZE) as u64;
    }
    Ok(ranges)
}

fn is_resident_anonymous(entry: &[u8]) -> bool {
    let entry = u64::from_le_bytes(entry.try_into().expect("chunks of 8"));
    entry & PAGEMAP_PRESENT != 0 && entry & PAGEMAP_FILE_OR_SHARED_ANON == 0
}

impl PageSource for ProcessSource {
    fn source(&self) -> Source {
        Source::Process {
            pid: self.pid,
            command: self.command.clone(),
            mappings: self.mappings,
            unreadable_pages: self.unreadable_pages,
        }
    }
    fn label(&self) -> String {
        format!("{}[{}]", self.command, self.pid)
    }
    fn total_pages(&self) -> u64 {
        self.total
    }
    fn next_chunk(&mut self, pages: &mut Vec<Page>, max: usize) -> Result<usize> {
        let mut added = 0usize;
        while added < max {
            let Some(&(start, end)) = self.ranges.get(self.range) else {
                break;
            };
            let address = self.address.max(start);
            if address >= end {
                self.range += 1;
                continue;
            }
            let count = (((end - address) / PAGE_SIZE as u64) as usize).min(max - added);
            let first = pages.len();
            pages.resize(first + count, [0u8; PAGE_SIZE]);
            match self
                .mem
                .read_exact_at(pages[first..].as_flattened_mut(), address)
            {
                Ok(()) => added += count,
                Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                    return Err(proc_error(
                        self.pid,
                        PathBuf::from(format!("/proc/{}/mem", self.pid)),
                        e,
                    ))
                }
                Err(_) => {
                    // The process unmapped part of it meanwhile: keep the pages still readable.
                    pages.truncate(first);
                    let mut page = [0u8; PAGE_SIZE];
                    for n in 0..count as u64 {
                        match self
                            .mem
                            .read_exact_at(&mut page, address + n * PAGE_SIZE as u64)
                        {
                            Ok(()) => {
                                pages.push(page);
                                added += 1;
                            }
                            Err(_) => self.unreadable_pages += 1,
                        }
                    }
                }
            }
            self.address = address + (count * PAGE_SIZE) as u64;
        }
        Ok(added)
    }
    fn rewind(&mut self) -> Result<()> {
        self.range = 0;
        self.address = 0;
        self.unreadable_pages = 0;
        Ok(())
    }
}

/// Several sources read one after the other, as one memory.
pub struct ChainSource {
    sources: Vec<Box<dyn PageSource>>,
    current: usize,
}

impl std::fmt::Debug for ChainSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainSource")
            .field("sources", &self.sources.len())
            .field("current", &self.current)
            .finish()
    }
}

impl ChainSource {
    /// The sources, read in order.
    pub fn new(sources: Vec<Box<dyn PageSource>>) -> Self {
        Self {
            sources,
            current: 0,
        }
    }

    /// Where each source's pages came from.
    pub fn sources(&self) -> Vec<Source> {
        self.sources.iter().map(|s| s.source()).collect()
    }
}

impl PageSource for ChainSource {
    fn source(&self) -> Source {
        self.sources
            .first()
            .map(|s| s.source())
            .unwrap_or(Source::File {
                path: PathBuf::new(),
                skipped_bytes: 0,
            })
    }
    fn label(&self) -> String {
        self.sources
            .iter()
            .map(|s| s.label())
            .collect::<Vec<_>>()
            .join(", ")
    }
    fn total_pages(&self) -> u64 {
        self.sources.iter().map(|s| s.total_pages()).sum()
    }
    fn next_chunk(&mut self, pages: &mut Vec<Page>, max: usize) -> Result<usize> {
        while let Some(source) = self.sources.get_mut(self.current) {
            let n = source.next_chunk(pages, max)?;
            if n > 0 {
                return Ok(n);
            }
            self.current += 1;
        }
        Ok(0)
    }
    fn rewind(&mut self) -> Result<()> {
        for source in &mut self.sources {
            source.rewind()?;
        }
        self.current = 0;
        Ok(())
    }
    fn read_once(&self) -> Option<String> {
        self.sources.iter().find_map(|s| s.read_once())
    }
}

/// Creates a file for memory contents at `path`: a new file
/// (`O_CREAT|O_EXCL`), readable by its owner only (mode 0600), and never
/// through a symbolic link (`O_NOFOLLOW`; with `O_EXCL` a link planted at
/// `path`, even a dangling one, is refused, so a link another user planted
/// cannot redirect the write or widen who may read it). An existing file is
/// refused too: it may be readable by others, and its mode would stay.
pub fn create_image_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::EEXIST | libc::ELOOP) => AnalyzeError::ImageExists {
                path: path.to_path_buf(),
            },
            _ => AnalyzeError::ImageWrite {
                path: path.to_path_buf(),
                source,
            },
        })
}

/// Creates the image file at `path` ([`create_image_file`]) and fills it
/// with `write`; a file left half written by a failure is removed.
fn write_new_image(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(create_image_file(path)?);
    let written = write(&mut out).and_then(|()| out.flush());
    if let Err(source) = written {
        // Ours: created above with O_EXCL.
        let _ = std::fs::remove_file(path);
        return Err(AnalyzeError::ImageWrite {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}

/// Copies every page of `source` into a new raw image file at `path` (see
/// [`create_image_file`]), a chunk at a time; returns the pages written. The
/// file is removed again if reading the source fails part way.
pub fn save_pages(source: &mut dyn PageSource, path: &Path) -> Result<u64> {
    use std::io::Write as _;
    let mut chunk = Vec::with_capacity(CHUNK_PAGES);
    let mut written = 0u64;
    let mut source_error = None;
    write_new_image(path, |out| loop {
        chunk.clear();
        match source.next_chunk(&mut chunk, CHUNK_PAGES) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(error) => {
                source_error = Some(error);
                return Err(std::io::Error::other("the source failed"));
            }
        }
        out.write_all(chunk.as_flattened())?;
        written += chunk.len() as u64;
    })
    .map_err(|error| source_error.take().unwrap_or(error))?;
    Ok(written)
}

/// Pages read per chunk (4 MiB): the unit of streaming.
pub const CHUNK_PAGES: usize = 1024;

/// One line of `/proc/PID/maps` worth reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, empty when anonymous).
    pub name: String,
}

/// The private writable mappings of a maps file: what swap (and zpage) could compress.
pub fn private_writable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            let name = fields.nth(3).unwrap_or("").to_string();
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            let kernel_provided = matches!(
                name.as_str(),
                "[vvar]" | "[vvar_vclock]" | "[vdso]" | "[vsyscall]"
            );
            (perms.starts_with("rw") && perms.ends_with('p') && !kernel_provided && end > start)
                .then_some(Mapping { start, end, name })
        })
        .collect()
}

/// pagemap bits (Documentation/admin-guide/mm/pagemap.rst).
const PAGEMAP_PRESENT: u64 = 1 << 63;
const PAGEMAP_FILE_OR_SHARED_ANON: u64 = 1 << 61;
/// Entries read from pagemap per call.
const PAGEMAP_BATCH: usize = 512;

/// Checks that `pid` is a process with user memory to read, and returns
/// its command name. Kernel threads have none, and neither has a process
/// that has exited but not been reaped (a zombie): both get their own
/// error, not the ESRCH their `/proc` files answer with.
fn process_with_user_memory(pid: u32) -> Result<String> {
    let stat_path = || PathBuf::from(format!("/proc/{pid}/stat"));
    let stat = i32::try_from(pid)
        .map_err(|_| procfs::ProcError::NotFound(None))
        .and_then(procfs::process::Process::new)
        .and_then(|process| process.stat())
        .map_err(|error| match error {
            procfs::ProcError::NotFound(_) => AnalyzeError::NoSuchProcess { pid },
            procfs::ProcError::PermissionDenied(_) => AnalyzeError::ProcessUnreadable {
                pid,
                path: stat_path(),
                source: ErrorKind::PermissionDenied.into(),
            },
            procfs::ProcError::Io(source, _) => AnalyzeError::Proc {
                path: stat_path(),
                source,
            },
            other => AnalyzeError::Proc {
                path: stat_path(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
    if stat.flags & procfs::process::StatFlags::PF_KTHREAD.bits() != 0 {
        return Err(AnalyzeError::KernelThread {
            pid,
            command: stat.comm,
        });
    }
    // Z: exited, not yet reaped; X: being torn down.
    if matches!(stat.state, 'Z' | 'X' | 'x') {
        return Err(AnalyzeError::Zombie {
            pid,
            command: stat.comm,
        });
    }
    Ok(stat.comm)
}

fn proc_error(pid: u32, path: PathBuf, source: std::io::Error) -> AnalyzeError {
    match source.kind() {
        ErrorKind::NotFound => AnalyzeError::NoSuchProcess { pid },
        // ESRCH: the process has no memory (any more): say why.
        _ if source.raw_os_error() == Some(libc::ESRCH) => match process_with_user_memory(pid) {
            Err(why) => why,
            Ok(_) => AnalyzeError::Proc { path, source },
        },
        ErrorKind::PermissionDenied => AnalyzeError::ProcessUnreadable { pid, path, source },
        _ if source.raw_os_error() == Some(libc::EPERM) => {
            AnalyzeError::ProcessUnreadable { pid, path, source }
        }
        _ => AnalyzeError::Proc { path, source },
    }
}

/// Reads the resident, private, anonymous pages of process `pid` (what zram or
/// zswap would be asked to compress), up to `max_pages`.
///
/// Pages still shared with a file (never written private file mappings) are
/// left out: the kernel drops those instead of swapping them.
pub fn capture_process(pid: u32, max_pages: Option<u64>) -> Result<MemoryImage> {
    let mut source = ProcessSource::open(pid, max_pages)?;
    let mut pages = Vec::new();
    while source.next_chunk(&mut pages, CHUNK_PAGES)? > 0 {}
    Ok(MemoryImage {
        source: source.source(),
        data: pages.as_flattened().to_vec(),
    })
}

/// PIDs of every process in /proc, ascending.
pub fn all_pids() -> Result<Vec<u32>> {
    let entries = std::fs::read_dir("/proc").map_err(|source| AnalyzeError::Proc {
        path: "/proc".into(),
        source,
    })?;
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parsing_keeps_private_writable_memory_only() {
        let maps = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
7f0000100000-7f0000200000 r--p 00000000 fd:01 123                        /usr/lib/libc.so.6
7f0000200000-7f0000201000 rw-s 00000000 00:05 77                         /dev/shm/x
7f0000201000-7f0000202000 rw-p 00001000 fd:01 124                        /usr/lib/libc.so.6
7ffd00000000-7ffd00002000 r--p 00000000 00:00 0                          [vvar]
7ffd00002000-7ffd00003000 rw-p 00000000 00:00 0                          [vvar_vclock]
7ffe00000000-7ffe00021000 rw-p 00000000 00:00 0                          [stack]
";
        let names: Vec<_> = private_writable_mappings(maps)
            .into_iter()
            .map(|m| (m.name, m.end - m.start))
            .collect();
        assert_eq!(
            names,
            [
                ("[heap]".to_string(), 0x21000),
                (String::new(), 0x100000),
                ("/usr/lib/libc.so.6".to_string(), 0x1000),
                ("[stack]".to_string(), 0x21000),
            ]
        );
    }
}
