//! Helpers shared by the integration tests that touch real kernel state.

#![allow(dead_code)]

use zpage_kernel::zram::ZramDevice;

/// True (and prints a skip line) unless the test may change kernel state
/// (`ZPAGE_TEST_KERNEL_STATE=1`, as root).
pub fn skip_unless_kernel_state_allowed(test: &str) -> bool {
    !zpage_kernel::kernel_state_tests_enabled(test)
}

/// True (and prints a skip line) when the test cannot run here.
pub fn skip_unless_root(test: &str) -> bool {
    if !zpage_kernel::is_root() {
        println!("SKIP {test}: needs root (CI runs as root)");
        return true;
    }
    false
}

/// Restores a zram device that was free (not initialised) when saved:
/// reset, then the algorithm it had.
#[derive(Debug)]
pub struct FreeZramGuard {
    pub device: ZramDevice,
    algorithm: String,
}

impl FreeZramGuard {
    /// Saves the state of `device` when it is free; `None` (with a skip
    /// line) when someone uses it, so the test leaves it alone.
    pub fn save(device: ZramDevice, test: &str) -> Option<FreeZramGuard> {
        match device.in_use_reason() {
            Ok(None) => {}
            Ok(Some(reason)) => {
                println!(
                    "SKIP {test}: {} is in use ({reason}); not touching it",
                    device.name()
                );
                return None;
            }
            Err(e) => {
                println!("SKIP {test}: cannot inspect {}: {e}", device.name());
                return None;
            }
        }
        let algorithm = device.current_algorithm().ok()?;
        Some(FreeZramGuard { device, algorithm })
    }
}

impl Drop for FreeZramGuard {
    fn drop(&mut self) {
        if let Err(e) = self.device.reset() {
            eprintln!("restore {}: reset failed: {e}", self.device.name());
        }
        if let Err(e) = std::fs::write(self.device.attr_path("comp_algorithm"), &self.algorithm) {
            eprintln!(
                "restore {}: algorithm {} failed: {e}",
                self.device.name(),
                self.algorithm
            );
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), incompressible for lzo/lz4.
pub fn random_page(seed: u64) -> Box<[u8; 4096]> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut page = Box::new([0u8; 4096]);
    for chunk in page.chunks_exact_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    page
}

/// A page of English-like text (compresses well but is not same-filled).
pub fn text_page(seed: u64) -> Box<[u8; 4096]> {
    let words = [
        "memory ",
        "compression ",
        "page ",
        "zram ",
        "swap ",
        "kernel ",
        "the ",
        "of ",
        "and ",
        "device ",
        "ratio ",
        "data ",
    ];
    let mut page = Box::new([0u8; 4096]);
    let mut state = seed | 1;
    let mut pos = 0;
    while pos < 4096 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let word = words[(state >> 33) as usize % words.len()].as_bytes();
        let n = word.len().min(4096 - pos);
        page[pos..pos + n].copy_from_slice(&word[..n]);
        pos += n;
    }
    page
}

/// A page filled with one repeated 8-byte word.
pub fn same_filled_page(word: u64) -> Box<[u8; 4096]> {
    let mut page = Box::new([0u8; 4096]);
    for chunk in page.chunks_exact_mut(8) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    page
}

/// Saves the whole swap/zram/zswap/sysctl state at creation and, on drop,
/// reverts whatever the test left behind (through its state file first,
/// then from the snapshot), so a failing test still restores the machine.
#[derive(Debug)]
pub struct MachineGuard {
    pub before: zpage_kernel::apply::SavedState,
    pub state_file: std::path::PathBuf,
    pub files: Vec<std::path::PathBuf>,
}

impl MachineGuard {
    pub fn save(name: &str) -> MachineGuard {
        let state_file = std::path::PathBuf::from(format!(
            "/tmp/zpage-kernel-test-{name}-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&state_file);
        MachineGuard {
            before: zpage_kernel::apply::SavedState::capture().unwrap(),
            state_file,
            files: Vec::new(),
        }
    }

    /// The comparable part of the machine state now.
    pub fn now() -> zpage_kernel::apply::SavedState {
        zpage_kernel::apply::SavedState::capture().unwrap()
    }
}

impl Drop for MachineGuard {
    fn drop(&mut self) {
        use zpage_kernel::apply;
        if self.state_file.exists() {
            if let Err(e) = apply::revert(&self.state_file) {
                eprintln!("guard: revert via the test's state file failed: {e}");
            }
        }
        // Swap areas the test itself turned on (revert leaves foreign ones alone).
        for area in zpage_kernel::procfs::swaps().unwrap_or_default() {
            if !self.before.swaps.iter().any(|s| s.path == area.path) {
                if let Err(e) = zpage_kernel::swapdev::swap_off(std::path::Path::new(&area.path)) {
                    eprintln!("guard: swapoff {}: {e}", area.path);
                }
            }
        }
        let now = MachineGuard::now();
        if now.swaps != self.before.swaps
            || now.zram != self.before.zram
            || now.zswap != self.before.zswap
            || now.sysctls != self.before.sysctls
        {
            eprintln!("guard: machine differs from the start of the test; restoring the snapshot");
            let snapshot_file = self.state_file.with_extension("guard.json");
            if self.before.store(&snapshot_file).is_ok() {
                if let Err(e) = apply::revert(&snapshot_file) {
                    eprintln!("guard: restoring the snapshot failed: {e}");
                }
            }
            let _ = std::fs::remove_file(&snapshot_file);
        }
        for file in &self.files {
            if file.exists()
                && !zpage_kernel::procfs::swaps()
                    .unwrap_or_default()
                    .iter()
                    .any(|s| std::path::Path::new(&s.path) == file)
            {
                let _ = std::fs::remove_file(file);
            }
        }
        let _ = std::fs::remove_file(&self.state_file);
    }
}
