//! Whether a tier is up: a failure takes it down (one line to standard
//! error), writes are refused without touching the device until the retry
//! interval has passed, and the first write that works brings it back (one
//! more line).

use parking_lot::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Down {
    cause: String,
    last_try: Instant,
}

#[derive(Debug)]
pub(crate) struct Health {
    describe: String,
    retry: Duration,
    down: Mutex<Option<Down>>,
}

impl Health {
    pub fn new(describe: &str, retry: Duration) -> Health {
        Health {
            describe: describe.to_string(),
            retry,
            down: Mutex::new(None),
        }
    }

    /// `Ok` when a write may try the device now; otherwise why not.
    pub fn may_try(&self) -> Result<(), crate::TierError> {
        let mut down = self.down.lock();
        match down.as_mut() {
            None => Ok(()),
            Some(d) if d.last_try.elapsed() >= self.retry => {
                d.last_try = Instant::now();
                Ok(())
            }
            Some(d) => Err(crate::TierError::Unavailable {
                tier: self.describe.clone(),
                cause: d.cause.clone(),
                retry_ms: self.retry.as_millis() as u64,
            }),
        }
    }

    pub fn failed(&self, cause: &dyn std::fmt::Display) {
        let mut down = self.down.lock();
        let cause = cause.to_string();
        if down.is_none() {
            eprintln!(
                "zpage: tier {} is down: {cause}; pages stay in memory, retrying every {} ms",
                self.describe,
                self.retry.as_millis()
            );
        }
        *down = Some(Down {
            cause,
            last_try: Instant::now(),
        });
    }

    pub fn succeeded(&self) {
        let mut down = self.down.lock();
        if let Some(d) = down.take() {
            eprintln!(
                "zpage: tier {} is back (it was down: {})",
                self.describe, d.cause
            );
        }
    }

    pub fn down_cause(&self) -> Option<String> {
        self.down.lock().as_ref().map(|d| d.cause.clone())
    }
}
