//! Blobs moved to the tier below RAM (writeback) and freed there.

use super::PageStore;
use crate::page_ref::PageRef;
use crate::{Result, StoreError};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use zpage_codec::PAGE_SIZE;
use zpage_tier::{Tier, TierRef};

impl PageStore {
    pub(super) fn free_in_tier(&self, tier_ref: TierRef) {
        if let Some(tier) = &self.config.tier {
            tier.free(tier_ref);
            self.gauges.tiered_pages.fetch_sub(1, Relaxed);
        }
    }

    /// The tier below RAM, when the store has one.
    pub fn tier(&self) -> Option<&Arc<dyn Tier>> {
        self.config.tier.as_ref()
    }

    /// Copies the blob `page_ref` names to the tier, bound to `page` (the
    /// caller's identity of the page: the same value must be given to read
    /// it back), and returns the reference of the copy; `None` for a page
    /// that takes no pool memory. `page_ref` stays valid: the caller installs
    /// the new reference and then frees the old one (or frees the new one if
    /// the page changed meanwhile), as zswap's writeback does. On error
    /// nothing was written and the page stays where it was.
    pub fn move_to_tier(&self, page_ref: PageRef, page: u64) -> Result<Option<PageRef>> {
        let Some(tier) = &self.config.tier else {
            return Err(StoreError::InvalidConfig(
                "writeback needs a tier below RAM: set PageStoreConfig::tier".into(),
            ));
        };
        let Some(kind) = page_ref.pool_kind() else {
            return Ok(None);
        };
        let mut blob = [0u8; PAGE_SIZE];
        let len = self
            .with_blob(page_ref, |bytes| {
                blob[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            })?
            .unwrap_or(0);
        let tier_ref = tier.put(page, &blob[..len])?;
        self.gauges.tiered_pages.fetch_add(1, Relaxed);
        self.gauges.tiered_bytes.fetch_add(len as u64, Relaxed);
        Ok(Some(PageRef::in_tier(kind, tier_ref)))
    }
}
