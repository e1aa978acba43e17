//! Both tiers against shadow copies: round trips, garbage collection under a
//! space bound, tampering (a flipped bit, two blobs swapped, a stale blob
//! replayed, a truncated file) and failing devices (missing, full, I/O
//! errors, deleted). Every case ends in exact bytes or a reported failure:
//! never wrong bytes.

use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;
use zpage_testsupport::TempDir;
use zpage_tier::{
    MemoryTier, MemoryTierConfig, PackedConfig, PackedTier, ReadFailure, Tier, TierError, TierRef,
    READ_BUFFER_BYTES, TAG_BYTES,
};

/// A blob that looks like a compressed page: `len` bytes of a seeded pattern.
fn blob(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

fn read(tier: &dyn Tier, r: TierRef, page: u64) -> Result<Vec<u8>, ReadFailure> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let n = tier.get(r, page, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn packed(dir: &TempDir, max_bytes: u64, segment_bytes: u64) -> PackedTier {
    let mut config = PackedConfig::new(dir.0.join("tier"), max_bytes);
    config.segment_bytes = segment_bytes;
    config.retry_interval = Duration::from_millis(50);
    PackedTier::new(config).unwrap()
}

#[test]
fn packed_round_trip_takes_compressed_size_on_disk() {
    let dir = TempDir::new("tier-round");
    let tier = packed(&dir, 64 << 20, 1 << 20);
    let mut shadow = HashMap::new();
    for page in 0..2000u64 {
        let b = blob(page, 300 + (page as usize * 37) % 3000);
        let r = tier.put(page, &b).unwrap();
        shadow.insert(page, (r, b));
    }
    for (page, (r, b)) in &shadow {
        assert_eq!(&read(&tier, *r, *page).unwrap(), b, "page {page}");
    }
    let stats = tier.stats();
    assert_eq!(stats.pages, 2000);
    let stored: u64 = shadow.values().map(|(_, b)| b.len() as u64).sum();
    assert_eq!(stats.stored_bytes, stored);
    assert_eq!(stats.backing_bytes, stored + 2000 * TAG_BYTES as u64);
    let ratio = stats.backing_bytes as f64 / stats.stored_bytes as f64;
    assert!(ratio < 1.02, "bytes on disk per stored byte {ratio}");
    // The file holds what the stats say, not 4 KiB a page.
    let on_disk = std::fs::metadata(dir.0.join("tier")).unwrap().len();
    assert!(on_disk <= stats.backing_bytes + (1 << 20), "{on_disk}");
    assert_eq!(stats.gets, 2000);
    assert!(stats.get_ns > 0);
}

#[test]
fn garbage_collection_keeps_every_live_blob_under_the_space_bound() {
    let dir = TempDir::new("tier-gc");
    // Four segments of 64 KiB: 192 KiB usable, one kept for collection.
    let tier = packed(&dir, 256 << 10, 64 << 10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut shadow: HashMap<u64, (TierRef, Vec<u8>)> = HashMap::new();
    let mut full = 0;
    for step in 0..20_000u64 {
        let page = rng.gen_range(0..100u64);
        if let Some((r, _)) = shadow.remove(&page) {
            tier.free(r);
        }
        let b = blob(step, rng.gen_range(200..2500));
        match tier.put(page, &b) {
            Ok(r) => {
                shadow.insert(page, (r, b));
            }
            Err(TierError::Full { .. }) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    let stats = tier.stats();
    assert!(stats.gc_runs > 10, "{stats:?}");
    assert!(stats.backing_bytes <= 256 << 10);
    assert_eq!(full, stats.put_fail_full);
    for (page, (r, b)) in &shadow {
        assert_eq!(&read(&tier, *r, *page).unwrap(), b, "page {page}");
    }
    // Filling with live pages until it refuses: a clear Full error, and
    // everything stored before still reads back.
    let mut extra = Vec::new();
    let err = loop {
        let page = 1000 + extra.len() as u64;
        match tier.put(page, &blob(page, 3000)) {
            Ok(r) => extra.push((page, r)),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, TierError::Full { .. }), "{err}");
    assert!(err.to_string().contains("give it more space"), "{err}");
    for (page, (r, b)) in &shadow {
        assert_eq!(&read(&tier, *r, *page).unwrap(), b, "page {page}");
    }
    for (page, r) in extra {
        assert_eq!(read(&tier, r, page).unwrap(), blob(page, 3000));
    }
}

#[test]
fn reads_race_with_garbage_collection_and_never_fail() {
    let dir = TempDir::new("tier-race");
    let tier = Arc::new(packed(&dir, 512 << 10, 64 << 10));
    // Stable pages the readers check, and churn that forces collections.
    let stable: Vec<(u64, TierRef, Vec<u8>)> = (0..40u64)
        .map(|page| {
            let b = blob(page, 1000);
            (page, tier.put(page, &b).unwrap(), b)
        })
        .collect();
    let stable = Arc::new(stable);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (tier, stable, stop) = (tier.clone(), stable.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (page, r, b) in stable.iter() {
                        assert_eq!(&read(&*tier, *r, *page).unwrap(), b, "page {page}");
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    // Pages replaced in random order: every segment keeps some live blobs,
    // so room is made by copying them forward, not by emptied segments.
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut churn: Vec<Option<TierRef>> = vec![None; 50];
    for step in 0..20_000u64 {
        let i = rng.gen_range(0..50);
        if let Some(r) = churn[i].take() {
            tier.free(r);
        }
        churn[i] = tier.put(100 + i as u64, &blob(step, 2000)).ok();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
    let stats = tier.stats();
    assert!(stats.gc_moved_blobs > 0, "{stats:?}");
    assert_eq!(stats.get_failures(), 0, "{stats:?}");
}

fn flip_bit(path: &std::path::Path, at: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, at).unwrap();
}

#[test]
fn tampered_packed_blobs_are_rejected_and_counted() {
    let dir = TempDir::new("tier-tamper");
    let path = dir.0.join("tier");
    let tier = packed(&dir, 8 << 20, 1 << 20);
    let pages: Vec<(u64, TierRef, Vec<u8>)> = (0..6u64)
        .map(|page| {
            let b = blob(page, 1500);
            (page, tier.put(page, &b).unwrap(), b)
        })
        .collect();
    // A flipped bit, in the data and in the tag.
    let (offset, len) = tier.location_for_test(pages[0].1).unwrap();
    flip_bit(&path, offset + 100);
    assert_eq!(read(&tier, pages[0].1, 0), Err(ReadFailure::Authentication));
    let (offset, len1) = tier.location_for_test(pages[1].1).unwrap();
    flip_bit(&path, offset + len1 as u64 - 1);
    assert_eq!(read(&tier, pages[1].1, 1), Err(ReadFailure::Authentication));
    assert_eq!(len, len1);
    // Two blobs of the same length swapped on disk.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let (a, _) = tier.location_for_test(pages[2].1).unwrap();
    let (b, _) = tier.location_for_test(pages[3].1).unwrap();
    let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
    file.read_exact_at(&mut x, a).unwrap();
    file.read_exact_at(&mut y, b).unwrap();
    file.write_all_at(&y, a).unwrap();
    file.write_all_at(&x, b).unwrap();
    assert_eq!(read(&tier, pages[2].1, 2), Err(ReadFailure::Authentication));
    assert_eq!(read(&tier, pages[3].1, 3), Err(ReadFailure::Authentication));
    // A stale version of page 4 replayed over its new one.
    let (old_at, _) = tier.location_for_test(pages[4].1).unwrap();
    let mut old = vec![0u8; len];
    file.read_exact_at(&mut old, old_at).unwrap();
    tier.free(pages[4].1);
    let new_blob = blob(44, 1500);
    let new_ref = tier.put(4, &new_blob).unwrap();
    assert_eq!(read(&tier, new_ref, 4).unwrap(), new_blob);
    let (new_at, _) = tier.location_for_test(new_ref).unwrap();
    file.write_all_at(&old, new_at).unwrap();
    assert_eq!(read(&tier, new_ref, 4), Err(ReadFailure::Authentication));
    // A reference asked for as another page's.
    assert_eq!(read(&tier, pages[5].1, 4), Err(ReadFailure::Stale));
    // Untouched pages still read back exactly.
    assert_eq!(read(&tier, pages[5].1, 5).unwrap(), pages[5].2);
    // A truncated file: the blobs past the cut are reported, not zeros.
    let (cut, _) = tier.location_for_test(pages[5].1).unwrap();
    file.set_len(cut + 10).unwrap();
    assert_eq!(read(&tier, pages[5].1, 5), Err(ReadFailure::Truncated));
    let stats = tier.stats();
    assert_eq!(stats.get_fail_authentication, 5, "{stats:?}");
    assert_eq!(stats.get_fail_truncated, 1);
    assert_eq!(stats.get_fail_stale, 1);
}

#[test]
fn tampered_memory_blobs_are_rejected_and_counted() {
    let tier = MemoryTier::new(MemoryTierConfig::default()).unwrap();
    let a = tier.put(1, &blob(1, 800)).unwrap();
    let b = tier.put(2, &blob(2, 800)).unwrap();
    assert_eq!(read(&tier, a, 1).unwrap(), blob(1, 800));
    tier.tamper_for_test(a, |bytes| bytes[5] ^= 1);
    assert_eq!(read(&tier, a, 1), Err(ReadFailure::Authentication));
    tier.tamper_for_test(b, |bytes| bytes.truncate(400));
    assert_eq!(read(&tier, b, 2), Err(ReadFailure::Authentication));
    assert_eq!(tier.stats().get_fail_authentication, 2);
    tier.free(a);
    assert_eq!(read(&tier, a, 1), Err(ReadFailure::Stale));
    let bounded = MemoryTier::new(MemoryTierConfig {
        max_bytes: Some(2000),
        ..Default::default()
    })
    .unwrap();
    bounded.put(1, &blob(1, 900)).unwrap();
    bounded.put(2, &blob(2, 900)).unwrap();
    assert!(matches!(
        bounded.put(3, &blob(3, 900)),
        Err(TierError::Full { .. })
    ));
}

#[test]
fn a_tier_missing_at_start_is_used_once_it_appears() {
    let dir = TempDir::new("tier-missing");
    let missing = dir.0.join("not-yet");
    let mut config = PackedConfig::new(missing.join("tier"), 4 << 20);
    config.retry_interval = Duration::from_millis(50);
    let tier = PackedTier::new(config).unwrap();
    let stats = tier.stats();
    assert!(!stats.available);
    assert!(stats.down_cause.unwrap().contains("open"));
    let err = tier.put(1, &blob(1, 100)).unwrap_err();
    assert!(matches!(err, TierError::Unavailable { .. }), "{err}");
    std::fs::create_dir_all(&missing).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let r = tier.put(1, &blob(1, 100)).unwrap();
    assert_eq!(read(&tier, r, 1).unwrap(), blob(1, 100));
    assert!(tier.stats().available);
    assert_eq!(tier.stats().put_fail_unavailable, 1);
}

#[test]
fn a_full_device_refuses_writes_and_keeps_what_it_holds() {
    let device_dir = TempDir::new("tier-full-device");
    let tier = PackedTier::new(PackedConfig {
        retry_interval: Duration::from_millis(50),
        ..PackedConfig::new(device_dir.0.join("tier"), 4 << 20)
    })
    .unwrap();
    // /dev/full fails every write with ENOSPC (as a tier it is refused:
    // a character device cannot give back what is written).
    tier.replace_device_for_test(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/full")
            .unwrap(),
    );
    let err = tier.put(1, &blob(1, 100)).unwrap_err();
    assert!(err.to_string().contains("write failed"), "{err}");
    assert!(!tier.stats().available);
    // Refused at once while down, retried after the interval (and still full).
    assert!(matches!(
        tier.put(1, &blob(1, 100)),
        Err(TierError::Unavailable { .. })
    ));
    std::thread::sleep(Duration::from_millis(60));
    assert!(matches!(
        tier.put(1, &blob(1, 100)),
        Err(TierError::Io { .. })
    ));
    let stats = tier.stats();
    assert_eq!((stats.put_fail_io, stats.put_fail_unavailable), (2, 1));

    // A file tier whose device becomes /dev/full mid-run: earlier pages
    // read back (through the file they were written to, reopened), new
    // writes fail and are counted, and the tier comes back when writes work.
    let dir = TempDir::new("tier-full");
    let tier = packed(&dir, 4 << 20, 1 << 20);
    let kept = tier.put(1, &blob(1, 700)).unwrap();
    tier.replace_device_for_test(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    );
    assert!(tier.put(2, &blob(2, 700)).is_err());
    // Reads from the write-only /dev/full descriptor fail with an I/O error.
    assert!(matches!(read(&tier, kept, 1), Err(ReadFailure::Io { .. })));
    tier.replace_device_for_test(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.0.join("tier"))
            .unwrap(),
    );
    assert_eq!(read(&tier, kept, 1).unwrap(), blob(1, 700));
    std::thread::sleep(Duration::from_millis(60));
    let r = tier.put(2, &blob(2, 700)).unwrap();
    assert_eq!(read(&tier, r, 2).unwrap(), blob(2, 700));
    assert!(tier.stats().available);
    assert_eq!(tier.stats().get_fail_io, 1);
}

#[test]
fn a_deleted_file_keeps_its_pages_readable() {
    let dir = TempDir::new("tier-deleted");
    let tier = packed(&dir, 4 << 20, 1 << 20);
    let refs: Vec<_> = (0..50u64)
        .map(|p| (p, tier.put(p, &blob(p, 1200)).unwrap()))
        .collect();
    std::fs::remove_file(dir.0.join("tier")).unwrap();
    tier.maintain();
    for (p, r) in &refs {
        assert_eq!(read(&tier, *r, *p).unwrap(), blob(*p, 1200));
    }
    let r = tier.put(99, &blob(99, 500)).unwrap();
    assert_eq!(read(&tier, r, 99).unwrap(), blob(99, 500));
}

#[test]
fn upkeep_collects_dead_blobs_so_disk_bytes_stay_near_stored_bytes() {
    let dir = TempDir::new("tier-upkeep");
    let tier = packed(&dir, 16 << 20, 64 << 10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut live = Vec::new();
    for page in 0..2000u64 {
        let b = blob(page, rng.gen_range(500..2500));
        let r = tier.put(page, &b).unwrap();
        // Three in four are freed again, scattered over every segment.
        if rng.gen_range(0..4) == 0 {
            live.push((page, r, b));
        } else {
            tier.free(r);
        }
    }
    // Collected as the log was written, not only by upkeep.
    assert!(tier.stats().gc_runs > 0, "{:?}", tier.stats());
    for _ in 0..100 {
        tier.maintain();
    }
    let after = tier.stats();
    let sealed = after.stored_bytes + after.pages * TAG_BYTES as u64;
    // Dead blobs are at most 5% of the bytes in segments.
    assert!(
        after.backing_bytes * 95 <= sealed * 100,
        "{} bytes in segments for {} sealed bytes",
        after.backing_bytes,
        sealed
    );
    assert!(after.gc_moved_blobs > 0);
    for (page, r, b) in &live {
        assert_eq!(&read(&tier, *r, *page).unwrap(), b, "page {page}");
    }
}

/// A compressed size as a page's would be: mostly 300 B to 3 KiB, some a
/// few hundred bytes, some stored raw at 4 KiB.
fn compressed_len(rng: &mut rand::rngs::StdRng) -> usize {
    match rng.gen_range(0..10) {
        0 => rng.gen_range(16..300),
        1 => 4096,
        _ => rng.gen_range(300..3000),
    }
}

/// Bytes on disk per byte of live payload, checked against the file's own
/// allocated blocks.
fn disk_ratio(tier: &PackedTier, path: &std::path::Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    let stats = tier.stats();
    let disk = std::fs::metadata(path).unwrap().blocks() * 512;
    assert_eq!(stats.disk_bytes, Some(disk), "{stats:?}");
    let ratio = stats.disk_bytes_per_payload_byte().unwrap();
    assert!((ratio - disk as f64 / stats.stored_bytes as f64).abs() < 1e-9);
    ratio
}

/// Pages written, rewritten and dropped at random, as a region's writeback
/// does under churn: the file never takes more than 1.1 bytes on disk per
/// byte of live compressed page, and every live page reads back exact.
///
/// The bound: dead blobs are kept at most 5% of the bytes in segments
/// (1/0.95 = 1.053 per live sealed byte), a blob's tag adds 16 bytes (at
/// most 1.2% over these sizes' mean of about 1.6 KiB), and each segment in
/// use may end in a partly written 4 KiB block (0.4% of a 1 MiB segment):
/// about 1.07 in all, so 1.1 leaves room and still fails if emptied
/// segments are not given back to the file system (the file would stay at
/// its high-water mark after the deletions) or collection slackens.
#[test]
fn churn_keeps_disk_bytes_within_a_tenth_of_the_live_payload() {
    let dir = TempDir::new("churn");
    let path = dir.0.join("tier");
    let tier = packed(&dir, 256 << 20, 1 << 20);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut shadow: HashMap<u64, (TierRef, Vec<u8>)> = HashMap::new();
    let mut worst: f64 = 0.0;
    let mut step = 0u64;
    let mut churn = |tier: &PackedTier, pages: u64, ops: u64, shadow: &mut HashMap<_, _>| {
        for _ in 0..ops {
            step += 1;
            let page = rng.gen_range(0..pages);
            if let Some((r, _)) = shadow.remove(&page) {
                tier.free(r);
            }
            // One in eight touches drops the page; the rest rewrite it.
            if rng.gen_range(0..8) != 0 {
                let b = blob(step, compressed_len(&mut rng));
                shadow.insert(page, (tier.put(page, &b).unwrap(), b));
            }
            if step.is_multiple_of(2000) && !shadow.is_empty() {
                worst = worst.max(disk_ratio(tier, &path));
            }
        }
    };
    // Grow to 24k pages (about 36 MiB), rewrite them many times over, then
    // drop to a fifth of that and churn again: the file must shrink on disk
    // with the live pages.
    churn(&tier, 24_000, 120_000, &mut shadow);
    let grown = tier.stats();
    let dropped: Vec<u64> = shadow.keys().copied().filter(|p| p % 5 != 0).collect();
    for page in dropped {
        let (r, _) = shadow.remove(&page).unwrap();
        tier.free(r);
    }
    for _ in 0..1000 {
        tier.maintain();
    }
    let shrunk_ratio = disk_ratio(&tier, &path);
    churn(&tier, 24_000, 20_000, &mut shadow);
    let stats = tier.stats();
    assert!(
        grown.gc_runs > 100 && stats.punched_segments > 10,
        "{stats:?}"
    );
    assert_eq!(stats.punch_failures, 0, "{stats:?}");
    assert!(
        worst <= 1.1,
        "disk bytes per payload byte reached {worst:.3}"
    );
    assert!(
        shrunk_ratio <= 1.1,
        "after dropping four pages in five: {shrunk_ratio:.3} ({stats:?})"
    );
    assert!(
        stats.log_end_bytes.unwrap() <= grown.log_end_bytes.unwrap(),
        "the log grew past its high-water mark: {stats:?}"
    );
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    for (page, (r, b)) in &shadow {
        let n = tier.get(*r, *page, &mut buf).unwrap();
        assert_eq!(&buf[..n], &b[..], "page {page}");
    }
    assert_eq!(stats.pages, shadow.len() as u64);
}

#[test]
fn the_tier_file_is_new_private_and_removed_with_the_tier() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("tier-file");
    let path = dir.0.join("tier");
    let tier = packed(&dir, 4 << 20, 1 << 20);
    let r = tier.put(1, &blob(1, 900)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "the tier file holds memory contents");
    // Another tier on the same path is refused: the file is never shared
    // or overwritten.
    let err = PackedTier::new(PackedConfig::new(&path, 4 << 20)).unwrap_err();
    assert!(err.to_string().contains("never overwrites"), "{err}");
    assert_eq!(read(&tier, r, 1).unwrap(), blob(1, 900));
    drop(tier);
    assert!(!path.exists(), "the tier removes its file");

    // A file in its place, or a link, is left alone and refused.
    std::fs::write(&path, b"someone's data").unwrap();
    let err = PackedTier::new(PackedConfig::new(&path, 4 << 20)).unwrap_err();
    assert!(err.to_string().contains("never overwrites"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"someone's data");
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = PackedTier::new(PackedConfig::new(&link, 4 << 20)).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    for device in ["/dev/null", "/dev/zero", "/dev/full"] {
        let err = PackedTier::new(PackedConfig::new(device, 4 << 20)).unwrap_err();
        assert!(
            err.to_string().contains("character device"),
            "{device}: {err}"
        );
    }
}
