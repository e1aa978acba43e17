use crate::{BackingConfig, PageStoreConfig, StoreError};

/// How a keyed [`Store`](crate::Store) compresses, packs, limits, orders and
/// writes back.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Codec, threshold, pool and its limit: the object store underneath.
    pub pages: PageStoreConfig,
    /// Base unit of the how-long-compressed histogram (Zircon's `pages_decompressed_unit_ns`).
    pub age_unit_ns: u64,
    /// Keep pages in LRU order (needed by `write_back`, `recompress` and
    /// `oldest_keys`); turning it off saves a lock and a tree insert per store.
    pub track_lru: bool,
    /// A file or device to write the oldest pages back to, when asked or
    /// when the pool limit is hit (zswap in front of its swap device), as a
    /// packed, sealed tier; `None` keeps everything in memory and refuses
    /// stores at the limit (unless `pages.tier` names another tier).
    pub backing: Option<BackingConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            pages: PageStoreConfig::default(),
            age_unit_ns: 1_000_000_000,
            track_lru: true,
            backing: None,
        }
    }
}

impl StoreConfig {
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        self.pages.validate()?;
        if self.age_unit_ns == 0 {
            return Err(StoreError::InvalidConfig(
                "age_unit_ns is 0: give the histogram's base unit in nanoseconds".into(),
            ));
        }
        if (self.backing.is_some() || self.pages.tier.is_some()) && !self.track_lru {
            return Err(StoreError::InvalidConfig(
                "a backing tier is set but track_lru is off: writeback picks the oldest pages from the LRU, so turn track_lru on".into(),
            ));
        }
        if self.backing.is_some() && self.pages.tier.is_some() {
            return Err(StoreError::InvalidConfig(
                "both backing and pages.tier are set: give one tier below RAM".into(),
            ));
        }
        Ok(())
    }
}
