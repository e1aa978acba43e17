//! Done-when 1: `status` figures equal the raw sysfs/procfs values read in
//! the same test, on the real zram0 after writing known data into it.

mod common;

use common::{
    random_page, same_filled_page, skip_unless_kernel_state_allowed, text_page, FreeZramGuard,
};
use zpage_kernel::status;
use zpage_kernel::zram::{MmStat, ZramDevice};
use zpage_kernel::KernelStateLock;

fn raw(path: &str) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

#[test]
fn status_json_equals_raw_kernel_values() {
    if skip_unless_kernel_state_allowed("status_json_equals_raw_kernel_values") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    let Ok(device) = ZramDevice::open(0) else {
        println!("SKIP status_json_equals_raw_kernel_values: no zram0");
        return;
    };
    let Some(guard) = FreeZramGuard::save(device, "status_json_equals_raw_kernel_values") else {
        return;
    };
    let device = &guard.device;
    device.configure("lzo", 8 << 20).unwrap();
    let mut pages: Vec<Box<[u8; 4096]>> = Vec::new();
    pages.extend((0..40).map(|_| same_filled_page(0)));
    pages.extend((0..10).map(|i| same_filled_page(0xdead_beef + i)));
    pages.extend((0..8).map(|i| random_page(100 + i)));
    pages.extend((0..30).map(|i| text_page(200 + i)));
    device.write_pages(pages.iter().map(|p| &**p)).unwrap();

    // Snapshot through status --json (serialised and parsed back, as a user sees it).
    let snapshot = status::collect();
    let json: serde_json::Value = serde_json::to_value(&snapshot).unwrap();
    // The raw files, read right after.
    let raw_mm = raw("/sys/block/zram0/mm_stat");
    let raw_mm_fields: Vec<u64> = raw_mm
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    let zram0 = json["zram"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["name"] == "zram0")
        .unwrap();
    let names = [
        "orig_data_size",
        "compr_data_size",
        "mem_used_total",
        "mem_limit",
        "mem_used_max",
        "same_pages",
        "pages_compacted",
        "huge_pages",
        "huge_pages_since",
    ];
    for (i, name) in names.iter().enumerate().take(raw_mm_fields.len()) {
        assert_eq!(
            zram0["mm_stat"][name].as_u64().unwrap(),
            raw_mm_fields[i],
            "mm_stat.{name}"
        );
    }
    println!("raw mm_stat: {raw_mm}");
    println!("status zram0.mm_stat: {}", zram0["mm_stat"]);
    let mm: MmStat = serde_json::from_value(zram0["mm_stat"].clone()).unwrap();
    assert_eq!(mm.same_pages, 50);
    assert_eq!(mm.huge_pages, 8);
    assert_eq!(mm.orig_data_size, 88 * 4096);
    assert_eq!(
        zram0["disksize_bytes"].as_u64().unwrap(),
        raw("/sys/block/zram0/disksize").parse::<u64>().unwrap()
    );
    assert_eq!(zram0["algorithm"], "lzo");
    assert!(raw("/sys/block/zram0/comp_algorithm").contains("[lzo]"));
    let expected_ratio = mm.orig_data_size as f64 / mm.compr_data_size as f64;
    assert!((zram0["ratio_data_to_compressed"].as_f64().unwrap() - expected_ratio).abs() < 1e-9);

    // zswap parameters: every file, byte for byte.
    for entry in std::fs::read_dir("/sys/module/zswap/parameters").unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        let value = raw(entry.path().to_str().unwrap());
        assert_eq!(
            json["zswap"]["parameters"][&name],
            value.as_str(),
            "zswap parameter {name}"
        );
    }
    // meminfo Zswap/Zswapped and MemTotal (kB in the file, bytes in status).
    let meminfo = raw("/proc/meminfo");
    let kib = |field: &str| -> u64 {
        let line = meminfo
            .lines()
            .find(|l| l.starts_with(&format!("{field}:")))
            .unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    assert_eq!(json["zswap"]["pool_bytes"].as_u64().unwrap(), kib("Zswap"));
    assert_eq!(
        json["zswap"]["stored_bytes"].as_u64().unwrap(),
        kib("Zswapped")
    );
    assert_eq!(json["mem_total_bytes"].as_u64().unwrap(), kib("MemTotal"));
    // Sysctls.
    for name in [
        "swappiness",
        "page-cluster",
        "watermark_scale_factor",
        "extfrag_threshold",
    ] {
        assert_eq!(
            json["sysctls"][format!("vm.{name}")],
            raw(&format!("/proc/sys/vm/{name}")).as_str()
        );
    }
    // The text view names the figures with units.
    let text = snapshot.render_text();
    assert!(
        text.contains("data stored, uncompressed (orig_data_size):   352.0 KiB"),
        "{text}"
    );
}
