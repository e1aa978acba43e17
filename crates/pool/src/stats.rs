//! Counters and the per-class table.

use std::fmt::Write as _;

use crate::PAGE_SIZE;

/// Pool-wide counters, kept incrementally so reading them is O(1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Live objects.
    pub objects: u64,
    /// Sum of the lengths of live objects.
    pub stored_bytes: u64,
    /// 4 KiB pages the pool holds.
    pub pages: u64,
    /// `pages * PAGE_SIZE`: what zram reports as `mem_used_total`.
    pub memory_used_bytes: u64,
    /// Highest `memory_used_bytes` seen (zram's `mem_used_max`).
    pub peak_memory_used_bytes: u64,
    /// Estimate of bookkeeping kept outside the pages (handle tables,
    /// per-page records); the kernel keeps the same data in slabs and
    /// `struct page`.
    pub metadata_bytes: u64,
    /// Pages released by compaction since the pool was built (zram's
    /// `mm_stat` `pages_compacted`).
    pub pages_compacted: u64,
}

impl PoolStats {
    /// Bytes of pool memory not holding blob data: rounding, headers, holes.
    pub fn fragmentation_bytes(&self) -> u64 {
        self.memory_used_bytes.saturating_sub(self.stored_bytes)
    }

    /// Fraction of pool memory not holding blob data; 0 for an empty pool.
    pub fn fragmentation(&self) -> f64 {
        if self.memory_used_bytes == 0 {
            return 0.0;
        }
        self.fragmentation_bytes() as f64 / self.memory_used_bytes as f64
    }

    /// `uncompressed_bytes` divided by the memory the pool uses for them
    /// (pages plus metadata); 0 for an empty pool.
    pub fn effective_ratio(&self, uncompressed_bytes: u64) -> f64 {
        let cost = self.memory_used_bytes + self.metadata_bytes;
        if cost == 0 {
            return 0.0;
        }
        uncompressed_bytes as f64 / cost as f64
    }
}

/// What one [`crate::Pool::compact`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompactStats {
    /// Objects copied to another place.
    pub objects_moved: u64,
    /// Pages given back.
    pub pages_freed: u64,
}

/// The sum of several compactions (or steps of one).
impl std::ops::AddAssign for CompactStats {
    fn add_assign(&mut self, other: CompactStats) {
        self.objects_moved += other.objects_moved;
        self.pages_freed += other.pages_freed;
    }
}

/// One row of the per-class table (zsmalloc's debugfs `classes` file).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClassStats {
    /// Object size of the class (zsmalloc), or the bucket key in bytes
    /// (tri-page, zbud; see the pool's docs).
    pub class_size: u32,
    /// Spans per in-use ratio group: `[0]` is 0-10 %, ..., `[9]` is 90-99 %,
    /// `[10]` is 100 %, as zsmalloc's `10%`..`100%` columns.
    pub fullness: [u64; 11],
    /// Object slots in this class's spans.
    pub objects_allocated: u64,
    /// Slots holding live objects.
    pub objects_used: u64,
    /// Pages held by this class.
    pub pages_used: u64,
    /// Pages per span (zsmalloc's `pages_per_zspage`).
    pub pages_per_span: u32,
    /// Pages compaction could free now (zsmalloc's `zs_can_compact`).
    pub freeable_pages: u64,
}

/// Column in [`ClassStats::fullness`] for a span with `used` of `capacity`
/// units in use (`capacity > 0`, `used > 0`).
///
/// Mirrors zsmalloc's `get_fullness_group`: a full span is the 100 % column,
/// anything else is `ratio / 10`, so one object out of 127 counts as 0-10 %.
pub(crate) fn fullness_column(used: u64, capacity: u64) -> usize {
    debug_assert!(used > 0 && capacity > 0 && used <= capacity);
    if used >= capacity {
        return 10;
    }
    ((100 * used / capacity) / 10) as usize
}

/// Renders `classes` as an aligned text table with zsmalloc's header.
///
/// The fullness columns are zsmalloc's: `10%` counts spans 0-10 % in use,
/// ..., `99%` counts 90-99 %, `100%` counts full spans. A `Total` row ends
/// the table.
pub fn format_classes(classes: &[ClassStats]) -> String {
    let mut header: Vec<String> = vec!["class".into(), "size".into()];
    header.extend((1..=9).map(|tenth| format!("{}%", tenth * 10)));
    header.extend(
        [
            "99%",
            "100%",
            "obj_allocated",
            "obj_used",
            "pages_used",
            "pages_per_zspage",
            "freeable",
        ]
        .map(String::from),
    );
    let mut rows = vec![header];
    let mut total_fullness = [0u64; 11];
    let (mut total_allocated, mut total_used, mut total_pages, mut total_freeable) =
        (0u64, 0u64, 0u64, 0u64);
    for (index, class) in classes.iter().enumerate() {
        let mut row = vec![index.to_string(), class.class_size.to_string()];
        row.extend(class.fullness.iter().map(u64::to_string));
        row.extend([
            class.objects_allocated.to_string(),
            class.objects_used.to_string(),
            class.pages_used.to_string(),
            class.pages_per_span.to_string(),
            class.freeable_pages.to_string(),
        ]);
        rows.push(row);
        for (total, value) in total_fullness.iter_mut().zip(class.fullness) {
            *total += value;
        }
        total_allocated += class.objects_allocated;
        total_used += class.objects_used;
        total_pages += class.pages_used;
        total_freeable += class.freeable_pages;
    }
    let mut total_row = vec!["Total".to_string(), String::new()];
    total_row.extend(total_fullness.iter().map(u64::to_string));
    total_row.extend([
        total_allocated.to_string(),
        total_used.to_string(),
        total_pages.to_string(),
        String::new(),
        total_freeable.to_string(),
    ]);
    rows.push(total_row);

    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:>width$}"))
            .collect();
        let _ = writeln!(text, "{}", cells.join(" ").trim_end());
    }
    text
}

/// Pool-wide counters shared by every design.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    stats: PoolStats,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> PoolStats {
        self.stats
    }

    pub(crate) fn object_stored(&mut self, len: usize) {
        self.stats.objects += 1;
        self.stats.stored_bytes += len as u64;
    }

    pub(crate) fn object_freed(&mut self, len: usize) {
        self.stats.objects -= 1;
        self.stats.stored_bytes -= len as u64;
    }

    pub(crate) fn pages_added(&mut self, pages: u64) {
        self.stats.pages += pages;
        self.stats.memory_used_bytes = self.stats.pages * PAGE_SIZE as u64;
        self.stats.peak_memory_used_bytes = self
            .stats
            .peak_memory_used_bytes
            .max(self.stats.memory_used_bytes);
    }

    pub(crate) fn pages_released(&mut self, pages: u64) {
        self.stats.pages -= pages;
        self.stats.memory_used_bytes = self.stats.pages * PAGE_SIZE as u64;
    }

    pub(crate) fn pages_compacted(&mut self, pages: u64) {
        self.stats.pages_compacted += pages;
    }

    pub(crate) fn metadata_grew(&mut self, bytes: usize) {
        self.stats.metadata_bytes += bytes as u64;
    }

    pub(crate) fn metadata_shrank(&mut self, bytes: usize) {
        self.stats.metadata_bytes -= bytes as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullness_columns_follow_zsmalloc() {
        assert_eq!(fullness_column(1, 127), 0);
        assert_eq!(fullness_column(13, 127), 1);
        assert_eq!(fullness_column(126, 127), 9);
        assert_eq!(fullness_column(127, 127), 10);
    }

    #[test]
    fn derived_ratios_handle_empty_pools() {
        let empty = PoolStats::default();
        assert_eq!(empty.fragmentation(), 0.0);
        assert_eq!(empty.effective_ratio(0), 0.0);
        let half = PoolStats {
            stored_bytes: 2048,
            memory_used_bytes: 4096,
            ..empty
        };
        assert_eq!(half.fragmentation_bytes(), 2048);
        assert_eq!(half.fragmentation(), 0.5);
        assert_eq!(half.effective_ratio(8192), 2.0);
    }

    #[test]
    fn table_has_zsmalloc_header_and_aligned_rows() {
        let row = ClassStats {
            class_size: 32,
            fullness: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            objects_allocated: 384,
            objects_used: 257,
            pages_used: 3,
            pages_per_span: 1,
            freeable_pages: 0,
        };
        let text = format_classes(&[row]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("class"), "{text}");
        assert!(lines[0].contains("10%"));
        assert!(lines[0].ends_with("obj_allocated obj_used pages_used pages_per_zspage freeable"));
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("Total"));
    }
}
