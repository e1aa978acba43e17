//! A region whose pool has a cap writes its oldest compressed pages back to
//! a Redis server (a real `redis-server` on loopback, started by the test).
//! Redis reads are not async-signal-safe, so faults hand them to the
//! budget's tier reader thread: every page reads back exact, and the
//! faulting thread allocates nothing on the way (a counting allocator that
//! counts the test thread only). A server that dies under the region ends
//! the process at the first fault on a page it held, naming the page and
//! the cause, never zeros. Skipped, with a message, where redis-server is
//! not installed.
//!
//! Size: `ZPAGE_TEST_TIER_MIB` (default 32 MiB of region, 8 MiB budget,
//! 2 MiB pool cap).

mod common;
#[path = "../../tier/tests/redis_server/mod.rs"]
mod redis_server;

use common::*;
use redis_server::{available, RedisServer, TempDir};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zpage_region::{Region, RegionConfig, PAGE_SIZE};
use zpage_store::{RedisConfig, RedisTier, Tier};
use zpage_testsupport::alloc::{self, PerThreadCounter};

#[global_allocator]
static ALLOCATOR: PerThreadCounter = PerThreadCounter;

const URL_ENV: &str = "ZPAGE_TEST_REGION_REDIS_URL";

fn value(page: usize, word: usize) -> u64 {
    let mut x = (page as u64) << 20 ^ (word as u64) << 4 ^ 0x5bd1;
    x ^= x >> 31;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

/// A quarter of each page's words set: compresses to about a third.
fn fill(region: &Region) {
    for p in 0..region.len() / PAGE_SIZE {
        for w in (0..PAGE_SIZE / 8).step_by(4) {
            write(region, p, w, value(p, w));
        }
    }
}

/// Every page exact; returns how many words differ (0), without
/// allocating on the way.
fn wrong_words(region: &Region) -> u64 {
    let mut wrong = 0;
    for p in 0..region.len() / PAGE_SIZE {
        for w in 0..PAGE_SIZE / 8 {
            let want = if w % 4 == 0 { value(p, w) } else { 0 };
            wrong += u64::from(read(region, p, w) != want);
        }
    }
    wrong
}

fn redis_region(url: &str, size: usize) -> (Region, Arc<dyn Tier>) {
    let mut tier_config = RedisConfig::new(url);
    tier_config.retry_interval = Duration::from_millis(100);
    let tier: Arc<dyn Tier> = Arc::new(RedisTier::new(tier_config).expect("tier"));
    let mut config = RegionConfig::new(size, 8 * MIB);
    config.max_pool_bytes = Some(2 * MIB as u64);
    config.tier = Some(Arc::clone(&tier));
    (Region::new(config).expect("region"), tier)
}

fn wait_written_back(tier: &dyn Tier, pages: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tier.stats().pages < pages && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(tier.stats().pages >= pages, "{:?}", tier.stats());
}

fn region_mib() -> usize {
    std::env::var("ZPAGE_TEST_TIER_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

#[test]
fn faults_read_pages_back_from_redis_through_the_reader_thread_without_allocating() {
    if !available("region redis") {
        return;
    }
    let dir = TempDir::new("region");
    let server = RedisServer::start(&dir, &[]);
    let size = region_mib() * MIB;
    let (region, tier) = redis_region(&server.url(), size);
    assert!(!tier.reads_are_async_signal_safe());
    fill(&region);
    wait_written_back(&*tier, (size / PAGE_SIZE / 4) as u64);
    // Warm what is built on first use (the test's own code paths).
    let _ = read(&region, 0, 0);
    let (wrong, allocations) = alloc::calls_during(|| wrong_words(&region));
    let stats = tier.stats();
    eprintln!("{stats:#?}");
    assert_eq!(wrong, 0, "wrong words");
    assert!(stats.gets > 0, "no fault read a page back from redis");
    assert_eq!(stats.get_failures(), 0);
    assert_eq!(
        allocations, 0,
        "the faulting thread allocated on the way to redis and back"
    );
    // A second pass: pages written back again and read again.
    assert_eq!(wrong_words(&region), 0);
    // What the second pass evicted goes back to the tier as the reclaimer
    // gets to it, not by the time the pass ends: wait for some of it.
    wait_written_back(&*tier, 1);
    assert!(region.budget().store_stats().tier.unwrap().backing_bytes > 0);
}

#[test]
fn a_dead_redis_server_ends_the_process_naming_the_page() {
    if !is_child() {
        if !available("region redis dead") {
            return;
        }
        let dir = TempDir::new("region-dead");
        let server = RedisServer::start(&dir, &[]);
        // Read by the child process, which the server outlives.
        std::env::set_var(URL_ENV, server.url());
        let stderr =
            run_child_expecting_abort("a_dead_redis_server_ends_the_process_naming_the_page");
        assert!(
            stderr.contains("zpage: page ")
                && stderr.contains("cannot be restored: it was written back to redis")
                && stderr.contains("the tier is unavailable"),
            "{stderr}"
        );
        assert!(!stderr.contains("READ BACK"), "{stderr}");
        return;
    }
    let url = std::env::var(URL_ENV).unwrap();
    let (region, tier) = redis_region(&url, 16 * MIB);
    fill(&region);
    wait_written_back(&*tier, 64);
    // The server goes away (as a crash would: nothing saved).
    let mut connection = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").exec(&mut connection);
    let wrong = wrong_words(&region);
    eprintln!("every page READ BACK although the server died ({wrong} wrong words)");
    std::process::exit(0);
}
