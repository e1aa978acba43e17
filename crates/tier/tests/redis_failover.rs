//! The Redis tier on a Redis Cluster with replicas (three masters, one
//! replica each, real `redis-server` processes on loopback) when a master is
//! killed: while its replica is not yet promoted, exactly the pages in the
//! dead master's slots fail as unavailable (within the tier's timeouts, never
//! wrong bytes) and the rest read back exact; once the replica is promoted,
//! every page reads back exact through the same tier (its cluster client
//! learns the new slot map by itself) and writes go there again. Writes a
//! master acknowledged but had not sent to its replica when it died are
//! lost: reported missing, never wrong bytes. Skipped, with a message, where
//! redis-server is not installed.

mod redis_server;

use rand::{Rng, SeedableRng};
use redis_server::{available, info_field, RedisCluster, TempDir};
use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};
use zpage_tier::{
    ReadFailure, RedisConfig, RedisTier, Tier, TierError, TierRef, READ_BUFFER_BYTES,
};

/// The tier's bound on connecting and on each command.
const TIMEOUT: Duration = Duration::from_millis(300);

/// A blob that looks like a compressed page, of a length and kind that vary
/// with `seed`: random bytes, a short repeated pattern, or mostly zeros.
fn blob(seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let len = rng.gen_range(1..=4096);
    match seed % 3 {
        0 => (0..len).map(|_| rng.gen()).collect(),
        1 => {
            let pattern: Vec<u8> = (0..rng.gen_range(1..64)).map(|_| rng.gen()).collect();
            pattern.iter().copied().cycle().take(len).collect()
        }
        _ => {
            let mut b = vec![0u8; len];
            for _ in 0..len / 50 + 1 {
                let at = rng.gen_range(0..len);
                b[at] = rng.gen();
            }
            b
        }
    }
}

fn read(tier: &dyn Tier, r: TierRef, page: u64) -> Result<Vec<u8>, ReadFailure> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let n = tier.get(r, page, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn tier_at(url: &str) -> RedisTier {
    let mut config = RedisConfig::new(url);
    config.timeout = TIMEOUT;
    config.retry_interval = Duration::from_millis(100);
    RedisTier::new(config).unwrap()
}

/// A page the test put through the tier.
struct Stored {
    page: u64,
    tier_ref: TierRef,
    seed: u64,
    on_victim: bool,
}

/// The slot of every key, asked of a live node in one pipeline.
fn slots_of_keys(cluster: &RedisCluster, node: usize, keys: &[String]) -> Vec<u16> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
    }
    pipe.query(&mut cluster.nodes[node].connection()).unwrap()
}

fn config_set(cluster: &RedisCluster, node: usize, name: &str, value: &str) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .exec(&mut cluster.nodes[node].connection())
        .unwrap();
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Puts `pages` through the tier and says which landed on `victim_slots`
/// (slots asked of node `asked`).
fn put_pages(
    tier: &RedisTier,
    cluster: &RedisCluster,
    asked: usize,
    victim_slots: &[(u16, u16)],
    pages: std::ops::Range<u64>,
) -> Vec<Stored> {
    let stored: Vec<(u64, TierRef)> = pages
        .map(|page| (page, tier.put(page, &blob(page)).unwrap()))
        .collect();
    let keys: Vec<String> = stored.iter().map(|&(_, r)| tier.key_of(r)).collect();
    let slots = slots_of_keys(cluster, asked, &keys);
    stored
        .into_iter()
        .zip(slots)
        .map(|((page, tier_ref), slot)| Stored {
            page,
            tier_ref,
            seed: page,
            on_victim: victim_slots.iter().any(|&(a, b)| (a..=b).contains(&slot)),
        })
        .collect()
}

/// Reads every page; returns (exact, lost by cause). Wrong bytes fail the test.
fn read_all(tier: &RedisTier, pages: &[Stored]) -> (usize, HashMap<ReadFailure, Vec<u64>>) {
    let mut exact = 0;
    let mut lost: HashMap<ReadFailure, Vec<u64>> = HashMap::new();
    for s in pages {
        match read(tier, s.tier_ref, s.page) {
            Ok(bytes) => {
                assert!(
                    bytes == blob(s.seed),
                    "page {} read back WRONG bytes",
                    s.page
                );
                exact += 1;
            }
            Err(failure) => lost.entry(failure).or_default().push(s.page),
        }
    }
    (exact, lost)
}

#[test]
fn failover_makes_a_dead_masters_pages_unavailable_then_exact_again() {
    if !available("failover") {
        return;
    }
    let dir = TempDir::new("failover");
    let mut cluster = RedisCluster::start_with_replicas(&dir, 3, 1);
    let tier = tier_at(&cluster.url());
    let masters = cluster.masters();
    let victim = masters[0];
    let survivor = masters[1];
    let replica = cluster.replicas_of(victim)[0];
    let victim_slots = cluster.slots_of(victim);
    let pages = put_pages(&tier, &cluster, survivor, &victim_slots, 0..2000);
    let on_victim = pages.iter().filter(|s| s.on_victim).count();
    assert!(
        (400..1000).contains(&on_victim),
        "{on_victim} of 2000 pages on one master of three"
    );
    let (exact, lost) = read_all(&tier, &pages);
    assert_eq!((exact, lost.len()), (2000, 0), "before the kill: {lost:?}");
    // Every acknowledged write is on the replicas before the master dies.
    cluster.wait_replicated();

    // The outage, held open until the checks are done: the replica may not
    // fail over until allowed, as if the election were slow.
    config_set(&cluster, replica, "cluster-replica-no-failover", "yes");
    cluster.nodes[victim].kill();
    let outage = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut during = HashMap::<ReadFailure, usize>::new();
    for s in &pages {
        let started = Instant::now();
        match read(&tier, s.tier_ref, s.page) {
            Ok(bytes) => {
                assert!(
                    bytes == blob(s.seed),
                    "page {} read back WRONG bytes",
                    s.page
                );
                assert!(!s.on_victim, "page {} on the dead master read back", s.page);
            }
            Err(failure) => {
                assert!(
                    s.on_victim,
                    "page {} on a live master failed: {failure:?}",
                    s.page
                );
                *during.entry(failure).or_default() += 1;
            }
        }
        slowest = slowest.max(started.elapsed());
    }
    assert_eq!(
        during,
        HashMap::from([(ReadFailure::Unavailable, on_victim)]),
        "during the outage exactly the dead master's pages are unavailable"
    );
    // Connecting and the command are each bounded by the timeout, and the
    // tier tries a broken link at most twice.
    assert!(
        slowest < TIMEOUT * 8,
        "a read during the outage took {slowest:?}"
    );
    // A write to the dead master's slots fails (the page would stay in RAM);
    // one to a live master's works.
    let mut refused = 0;
    for page in 10_000..10_030u64 {
        match tier.put(page, &blob(page)) {
            Ok(_) => {}
            Err(TierError::Io { .. } | TierError::Unavailable { .. }) => refused += 1,
            Err(other) => panic!("page {page}: {other}"),
        }
    }
    assert!(refused > 0, "no write reached the dead master's slots");
    let stats = tier.stats();
    assert_eq!(stats.get_fail_unavailable, on_victim as u64, "{stats:?}");
    eprintln!(
        "outage: {on_victim} pages unavailable, slowest read {slowest:?}, checks took {:?}",
        outage.elapsed()
    );

    // The election: the replica takes over the dead master's slots.
    config_set(&cluster, replica, "cluster-replica-no-failover", "no");
    let election = Instant::now();
    cluster.wait_serves(replica, &victim_slots);
    let role = info_field(&cluster.info(replica, "replication"), "role");
    assert_eq!(role.as_deref(), Some("master"));
    let promoted_after = election.elapsed();

    // Through the same tier, no reconnecting by hand: every page exact.
    let reading = Instant::now();
    let (exact, lost) = read_all(&tier, &pages);
    assert_eq!(
        (exact, lost),
        (2000, HashMap::new()),
        "after the failover every page reads back exact"
    );
    let read_back_in = reading.elapsed();
    assert!(
        read_back_in < Duration::from_secs(30),
        "reading 2000 pages after the failover took {read_back_in:?}"
    );
    // Writes go to the promoted replica again (after the retry interval).
    std::thread::sleep(Duration::from_millis(150));
    let more = put_pages(&tier, &cluster, replica, &victim_slots, 20_000..20_300);
    assert!(more.iter().any(|s| s.on_victim));
    let (exact, lost) = read_all(&tier, &more);
    assert_eq!((exact, lost), (300, HashMap::new()));
    assert!(tier.stats().available);
    eprintln!(
        "promoted {promoted_after:?} after the election was allowed; 2000 pages read back exact in {read_back_in:?}"
    );
}

#[test]
fn writes_not_yet_replicated_when_the_master_dies_are_reported_missing_never_wrong() {
    if !available("unreplicated") {
        return;
    }
    let dir = TempDir::new("unreplicated");
    let mut cluster = RedisCluster::start_with_replicas(&dir, 3, 1);
    let tier = tier_at(&cluster.url());
    let masters = cluster.masters();
    let (victim, survivor) = (masters[0], masters[1]);
    let replica = cluster.replicas_of(victim)[0];
    let victim_slots = cluster.slots_of(victim);
    let early = put_pages(&tier, &cluster, survivor, &victim_slots, 0..500);
    cluster.wait_replicated();

    // The replica stops reading its master's stream (SIGSTOP): the master
    // acknowledges writes that its replica does not have. Write until more
    // than the socket buffers hold is waiting in the master's own memory
    // for that replica: those writes die with the master.
    let replica_pid = cluster.nodes[replica].pid().unwrap();
    signal(replica_pid, "-STOP");
    let stopped = Instant::now();
    let mut late = Vec::new();
    let mut next = 100_000u64;
    loop {
        late.extend(put_pages(
            &tier,
            &cluster,
            survivor,
            &victim_slots,
            next..next + 500,
        ));
        next += 500;
        let waiting = replica_backlog_bytes(&cluster, victim);
        if waiting > 1 << 20 {
            eprintln!(
                "{waiting} bytes waiting for the stopped replica after {} late pages",
                late.len()
            );
            break;
        }
        if stopped.elapsed() > Duration::from_secs(8) || late.len() >= 40_000 {
            signal(replica_pid, "-CONT");
            panic!(
                "after {} late pages only {waiting} bytes wait for the stopped replica",
                late.len()
            );
        }
    }
    cluster.nodes[victim].kill();
    signal(replica_pid, "-CONT");
    let killed = Instant::now();
    cluster.wait_serves(replica, &victim_slots);
    eprintln!(
        "the replica took over {:?} after its master was killed (cluster-node-timeout 1000 ms)",
        killed.elapsed()
    );

    let (exact, lost) = read_all(&tier, &early);
    assert_eq!(
        (exact, lost),
        (early.len(), HashMap::new()),
        "replicated pages"
    );
    let (exact, lost) = read_all(&tier, &late);
    let missing = lost.get(&ReadFailure::Missing).cloned().unwrap_or_default();
    assert_eq!(
        lost.keys().copied().collect::<Vec<_>>(),
        if missing.is_empty() {
            vec![]
        } else {
            vec![ReadFailure::Missing]
        },
        "late pages fail only as missing: {lost:?}"
    );
    assert!(!missing.is_empty(), "no write was lost with the master");
    let on_victim: HashMap<u64, bool> = late.iter().map(|s| (s.page, s.on_victim)).collect();
    assert!(
        missing.iter().all(|p| on_victim[p]),
        "only the dead master's pages are missing"
    );
    assert_eq!(exact + missing.len(), late.len());
    eprintln!(
        "{} late pages: {exact} exact, {} missing (of {} on the dead master)",
        late.len(),
        missing.len(),
        late.iter().filter(|s| s.on_victim).count()
    );
}

/// Bytes of the replication stream node `master` holds for its replica and
/// has not yet handed to the socket (`omem` of the replica's client).
fn replica_backlog_bytes(cluster: &RedisCluster, master: usize) -> u64 {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.nodes[master].connection())
        .unwrap();
    list.split_whitespace()
        .filter_map(|field| field.strip_prefix("omem="))
        .filter_map(|v| v.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}
