//! Walking the loaded objects' dynamic sections and rewriting GOT entries.
//!
//! Written here rather than taken from a crate: the crates that parse ELF
//! (`goblin`, `object`) read files, not the relocated image the loader made
//! (whose dynamic entries may or may not have been rebased), and the ones
//! that patch GOTs in process (`plthook`, `plt-rs`, `gothook`) patch one
//! object at a time by name, do not handle `GLOB_DAT` entries, full RELRO
//! or lazily bound slots the way this needs, or panic and print on error.
//! What this needs is small: for each object, its `PT_DYNAMIC` tables and
//! two relocation tables, read in place.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::real::Real;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_RPATH: i64 = 15;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const DT_RUNPATH: i64 = 29;

#[cfg(target_arch = "x86_64")]
const R_GLOB_DAT: u32 = 6;
#[cfg(target_arch = "x86_64")]
const R_JUMP_SLOT: u32 = 7;
#[cfg(target_arch = "aarch64")]
const R_GLOB_DAT: u32 = 1025;
#[cfg(target_arch = "aarch64")]
const R_JUMP_SLOT: u32 = 1026;

#[repr(C)]
struct Dyn {
    tag: i64,
    value: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

const _: () = assert!(std::mem::size_of::<Rela>() == 24 && std::mem::size_of::<Sym>() == 24);
const _: () = assert!(std::mem::size_of::<libc::Elf64_Phdr>() == 56);

/// What walks did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Objects whose tables were read.
    pub objects: usize,
    /// Entries now pointing at a wrapper.
    pub patched: usize,
    /// Entries of a wrapped name bound to another definition (left alone).
    pub bound_elsewhere: usize,
    /// Entries that could not be written (`mprotect` refused).
    pub failed: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.objects += other.objects;
        self.patched += other.patched;
        self.bound_elsewhere += other.bound_elsewhere;
        self.failed += other.failed;
    }
}

struct Function {
    name: &'static [u8],
    real: usize,
    wrapper: usize,
    is_dlopen: bool,
}

/// The state kept between walks.
pub(super) struct Walker {
    functions: Vec<Function>,
    /// An address inside the object holding this code, and one inside the
    /// C library: both objects are left alone.
    own_code: usize,
    libc_code: usize,
    /// The loader and the vDSO, left alone too.
    skipped_bases: [usize; 2],
    /// The loader's count of objects loaded, at the last walk.
    last_adds: Option<u64>,
    /// Objects already walked, by load address.
    walked: HashSet<usize>,
    /// False if the object holding this code has a run path (see the
    /// module docs of `inproc`).
    wrap_dlopen: bool,
    /// Objects whose `dlopen` is wrapped despite their run path (see
    /// [`super::install_with`]).
    dlopen_despite_run_path: fn(&std::ffi::CStr) -> bool,
    pub totals: Counts,
}

/// One loaded object as the loader describes it.
struct Object<'a> {
    base: usize,
    headers: &'a [libc::Elf64_Phdr],
}

impl Object<'_> {
    fn loads(&self) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
        self.headers
            .iter()
            .filter(|h| h.p_type == PT_LOAD)
            .map(|h| {
                let start = self.base + h.p_vaddr as usize;
                (start, start + h.p_memsz as usize, h.p_flags)
            })
    }

    fn contains(&self, addr: usize) -> bool {
        self.loads().any(|(s, e, _)| (s..e).contains(&addr))
    }

    /// The protection the page holding `addr` has now, if it lies in the
    /// object.
    fn protection(&self, addr: usize) -> Option<i32> {
        let page = page_size();
        let relro = self.headers.iter().find(|h| h.p_type == PT_GNU_RELRO);
        if let Some(h) = relro {
            let start = (self.base + h.p_vaddr as usize) & !(page - 1);
            let end = (self.base + (h.p_vaddr + h.p_memsz) as usize) & !(page - 1);
            if (start..end).contains(&addr) {
                return Some(libc::PROT_READ);
            }
        }
        let (_, _, flags) = self.loads().find(|&(s, e, _)| (s..e).contains(&addr))?;
        let mut prot = 0;
        for (flag, p) in [
            (PF_R, libc::PROT_READ),
            (PF_W, libc::PROT_WRITE),
            (PF_X, libc::PROT_EXEC),
        ] {
            if flags & flag != 0 {
                prot |= p;
            }
        }
        Some(prot)
    }

    /// A dynamic entry's address: rebased by the loader already, or an
    /// offset from the load address.
    fn absolute(&self, value: u64) -> usize {
        let value = value as usize;
        if self.contains(value) {
            value
        } else {
            self.base.wrapping_add(value)
        }
    }

    /// The object's dynamic entries.
    fn dynamic(&self) -> Option<&[Dyn]> {
        let h = self.headers.iter().find(|h| h.p_type == PT_DYNAMIC)?;
        let start = (self.base + h.p_vaddr as usize) as *const Dyn;
        let mut n = 0;
        // SAFETY: the loader mapped the dynamic section of a loaded object;
        // it ends with DT_NULL.
        unsafe {
            while (*start.add(n)).tag != DT_NULL {
                n += 1;
            }
            Some(std::slice::from_raw_parts(start, n))
        }
    }
}

fn page_size() -> usize {
    zpage_region::PAGE_SIZE
}

fn tag(dynamic: &[Dyn], wanted: i64) -> Option<u64> {
    dynamic.iter().find(|d| d.tag == wanted).map(|d| d.value)
}

/// Calls `f` on each loaded object with the loader's count of objects
/// loaded so far; `f` returns false to stop.
fn each_object(mut f: impl FnMut(&libc::dl_phdr_info, u64) -> bool) {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut dyn FnMut` passed below, alive for
        // the walk; `info` is valid for the callback.
        let (f, info) = unsafe {
            (
                &mut *(data as *mut &mut dyn FnMut(&libc::dl_phdr_info, u64) -> bool),
                &*info,
            )
        };
        let has_adds = size
            >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_adds) + std::mem::size_of::<u64>();
        let adds = if has_adds { info.dlpi_adds } else { 0 };
        i32::from(!f(info, adds))
    }
    let mut f: &mut dyn FnMut(&libc::dl_phdr_info, u64) -> bool = &mut f;
    // SAFETY: the callback and its data live across the call.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), &mut f as *mut _ as *mut libc::c_void);
    }
}

impl Walker {
    /// `listed`: each function's slot (resolved now) and wrapper address;
    /// `own_code`: an address in the object holding this code.
    pub(super) fn new(
        listed: Vec<(&'static Real, usize)>,
        own_code: usize,
        dlopen_despite_run_path: fn(&std::ffi::CStr) -> bool,
    ) -> Result<Walker, String> {
        let mut functions = Vec::with_capacity(listed.len());
        for (real, wrapper) in listed {
            let address = real.resolve();
            if address == 0 {
                return Err(format!(
                    "the C library's {} was not found (dlsym)",
                    real.name()
                ));
            }
            functions.push(Function {
                name: real.name().as_bytes(),
                real: address,
                wrapper,
                is_dlopen: real.name() == "dlopen",
            });
        }
        // SAFETY: getauxval reads the auxiliary vector; 0 if absent.
        let skipped_bases = unsafe {
            [
                libc::getauxval(libc::AT_BASE) as usize,
                libc::getauxval(libc::AT_SYSINFO_EHDR) as usize,
            ]
        };
        let libc_code = libc::gnu_get_libc_version as unsafe extern "C" fn() -> _ as usize;
        let mut walker = Walker {
            functions,
            own_code,
            libc_code,
            skipped_bases,
            last_adds: None,
            walked: HashSet::new(),
            wrap_dlopen: true,
            dlopen_despite_run_path,
            totals: Counts::default(),
        };
        let mut own_has_run_path = false;
        each_object(|info, _| {
            // SAFETY: the loader's program headers for this object.
            let object = unsafe { object_of(info) };
            if object.contains(own_code) {
                own_has_run_path = object
                    .dynamic()
                    .is_some_and(|d| tag(d, DT_RPATH).is_some() || tag(d, DT_RUNPATH).is_some());
                return false;
            }
            true
        });
        walker.wrap_dlopen = !own_has_run_path;
        Ok(walker)
    }

    /// Patches the objects loaded since the last walk.
    pub(super) fn patch_new_objects(&mut self) -> Counts {
        let mut adds_now = None;
        each_object(|_, adds| {
            adds_now = Some(adds);
            false
        });
        if adds_now.is_some() && adds_now == self.last_adds && adds_now != Some(0) {
            return Counts::default();
        }
        let mut counts = Counts::default();
        let mut seen = HashSet::new();
        each_object(|info, _| {
            // SAFETY: the loader's program headers for this object.
            let object = unsafe { object_of(info) };
            seen.insert(object.base);
            if self.walked.contains(&object.base)
                || self.skipped_bases.contains(&object.base)
                || object.contains(self.own_code)
                || object.contains(self.libc_code)
            {
                return true;
            }
            counts.objects += 1;
            let name = if info.dlpi_name.is_null() {
                c""
            } else {
                // SAFETY: the loader's NUL-terminated name of the object.
                unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            };
            counts.add(self.patch_object(&object, name));
            true
        });
        // An object unloaded since may be replaced by another at its address.
        self.walked = seen;
        self.last_adds = adds_now;
        self.totals.add(counts);
        counts
    }

    fn patch_object(&self, object: &Object<'_>, name_of: &std::ffi::CStr) -> Counts {
        let mut counts = Counts::default();
        let Some(dynamic) = object.dynamic() else {
            return counts;
        };
        let (Some(symtab), Some(strtab)) = (tag(dynamic, DT_SYMTAB), tag(dynamic, DT_STRTAB))
        else {
            return counts;
        };
        let symtab = object.absolute(symtab) as *const Sym;
        let strtab = object.absolute(strtab) as *const u8;
        let has_run_path = tag(dynamic, DT_RPATH).is_some() || tag(dynamic, DT_RUNPATH).is_some();
        let mut tables = Vec::with_capacity(2);
        if let (Some(rela), Some(size)) = (tag(dynamic, DT_RELA), tag(dynamic, DT_RELASZ)) {
            tables.push((rela, size));
        }
        let plt_is_rela = tag(dynamic, DT_PLTREL).is_none_or(|k| k == DT_RELA as u64);
        if let (Some(rela), Some(size), true) = (
            tag(dynamic, DT_JMPREL),
            tag(dynamic, DT_PLTRELSZ),
            plt_is_rela,
        ) {
            tables.push((rela, size));
        }
        for (table, size) in tables {
            let table = object.absolute(table) as *const Rela;
            let n = size as usize / std::mem::size_of::<Rela>();
            for i in 0..n {
                // SAFETY: entry `i` of a relocation table the dynamic
                // section names, mapped with the object.
                let rela = unsafe { &*table.add(i) };
                let kind = (rela.info & 0xffff_ffff) as u32;
                if kind != R_JUMP_SLOT && kind != R_GLOB_DAT {
                    continue;
                }
                // SAFETY: the symbol index of a relocation of this object.
                let sym = unsafe { &*symtab.add((rela.info >> 32) as usize) };
                // A definition of the object's own is not the C library's.
                if sym.shndx != 0 {
                    continue;
                }
                // SAFETY: a symbol name in the object's string table.
                let name =
                    unsafe { std::ffi::CStr::from_ptr(strtab.add(sym.name as usize).cast()) };
                let Some(function) = self.functions.iter().find(|f| f.name == name.to_bytes())
                else {
                    continue;
                };
                if function.is_dlopen
                    && (!self.wrap_dlopen
                        || (has_run_path && !(self.dlopen_despite_run_path)(name_of)))
                {
                    continue;
                }
                let slot = object.base + rela.offset as usize;
                match self.patch_slot(object, slot, function) {
                    Some(true) => counts.patched += 1,
                    Some(false) => counts.bound_elsewhere += 1,
                    None => counts.failed += 1,
                }
            }
        }
        counts
    }

    /// Points `slot` at the wrapper if it holds the C library's function or
    /// the object's own lazy-binding stub. `Some(false)`: bound elsewhere,
    /// left alone; `None`: the page could not be made writable.
    fn patch_slot(&self, object: &Object<'_>, slot: usize, function: &Function) -> Option<bool> {
        if !slot.is_multiple_of(std::mem::align_of::<usize>()) {
            return Some(false);
        }
        let prot = object.protection(slot)?;
        // SAFETY: an aligned GOT entry of a loaded object: a word the loader
        // wrote and that stays mapped while the object is loaded (the walk
        // holds the loader's lock).
        let entry = unsafe { &*(slot as *const AtomicUsize) };
        let now = entry.load(Ordering::Acquire);
        if now == function.wrapper {
            return Some(true);
        }
        if now != function.real && !object.contains(now) {
            return Some(false);
        }
        if prot & libc::PROT_WRITE != 0 {
            entry.store(function.wrapper, Ordering::Release);
            return Some(true);
        }
        let page = slot & !(page_size() - 1);
        // SAFETY: the page holding the entry, made writable for one store
        // and given back its protection (RELRO: read-only).
        unsafe {
            if libc::mprotect(page as *mut _, page_size(), prot | libc::PROT_WRITE) != 0 {
                return None;
            }
            entry.store(function.wrapper, Ordering::Release);
            libc::mprotect(page as *mut _, page_size(), prot);
        }
        Some(true)
    }
}

/// # Safety
/// `info` is the loader's description of a loaded object.
unsafe fn object_of(info: &libc::dl_phdr_info) -> Object<'_> {
    let headers = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: per the contract, dlpi_phnum headers at dlpi_phdr.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    Object {
        base: info.dlpi_addr as usize,
        headers,
    }
}
