//! The keyed store writing back to a Redis server (a real `redis-server` on
//! loopback, started by the test): pages written back read back exactly;
//! with the server killed, exactly the written-back pages are reported lost
//! (by key and cause), every page still in RAM reads back exact, writeback
//! fails and keeps pages in RAM, and the store keeps running; with the
//! server back, writeback goes there again. On a Redis Cluster with
//! replicas, the pages of a killed master are reported lost while its
//! replica is not yet promoted, and read back exact (and are no longer
//! listed lost) once it is. Skipped, with a message, where redis-server is
//! not installed.

#[path = "pages_support/mod.rs"]
mod pages;
#[path = "../../tier/tests/redis_server/mod.rs"]
mod redis_server;

use redis_server::{available, RedisCluster, RedisServer, TempDir};
use std::sync::Arc;
use std::time::Duration;
use zpage_codec::PAGE_SIZE;
use zpage_store::{
    EntryKind, PageStoreConfig, ReadFailure, RedisConfig, RedisTier, Store, StoreConfig,
    StoreError, StoreOutcome, Worker,
};

/// A store writing back to Redis at `url`, holding 400 pages (keys 0..400)
/// in its pool; returns it, a worker, and the keys not same-filled.
fn store_holding_400_pages(url: String) -> (Store, Worker, Vec<u64>) {
    let mut config = RedisConfig::new(url);
    config.timeout = Duration::from_millis(300);
    config.retry_interval = Duration::from_millis(100);
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            tier: Some(Arc::new(RedisTier::new(config).unwrap())),
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    let keys: Vec<u64> = (0..400u64)
        .filter(|&key| {
            store
                .store(&mut worker, key, &pages::page_for(key, 0))
                .unwrap()
                != StoreOutcome::SameFilled
        })
        .collect();
    (store, worker, keys)
}

fn written_back(store: &Store, keys: &[u64]) -> Vec<u64> {
    keys.iter()
        .copied()
        .filter(|&k| {
            store
                .entry_info(k)
                .is_some_and(|e| e.kind == EntryKind::WrittenBack)
        })
        .collect()
}

#[test]
fn a_killed_redis_server_loses_only_written_back_pages_and_is_used_again_when_back() {
    if !available("store redis") {
        return;
    }
    let dir = TempDir::new("store");
    let mut server = RedisServer::start(&dir, &[]);
    let (store, mut worker, keys) = store_holding_400_pages(server.url());
    assert!(keys.len() > 250, "{} pages in the pool", keys.len());
    assert_eq!(store.write_back(100).unwrap(), 100);
    let in_redis = written_back(&store, &keys);
    assert_eq!(in_redis.len(), 100);
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for &key in &keys {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)));
    }
    assert_eq!(store.write_back(50).unwrap(), 50);
    let in_redis = written_back(&store, &keys);
    assert_eq!(in_redis.len(), 150);

    server.kill();
    let mut lost = Vec::new();
    for &key in &keys {
        match store.load(&mut worker, key, &mut out) {
            Ok(()) => assert_eq!(pages::identify(&out), Some((key, 0)), "key {key}"),
            Err(StoreError::PageLost {
                key: k,
                cause,
                tier,
            }) => {
                assert_eq!(k, key);
                assert_eq!(cause, ReadFailure::Unavailable);
                assert!(tier.contains("redis"), "{tier}");
                lost.push(key);
            }
            Err(e) => panic!("key {key}: {e}"),
        }
    }
    assert_eq!(lost, in_redis, "exactly the written-back pages are lost");
    let listed: Vec<u64> = store.lost_pages().into_iter().map(|(k, _)| k).collect();
    assert_eq!(listed, lost);
    // Writeback fails; the pages stay in RAM and read back.
    let error = store.write_back(20).unwrap_err();
    assert!(error.to_string().contains("redis"), "{error}");
    let tier = store.stats().tier.unwrap();
    assert!(!tier.available, "{tier:?}");
    assert_eq!(tier.get_fail_unavailable, lost.len() as u64);
    let in_ram: Vec<u64> = keys.iter().copied().filter(|k| !lost.contains(k)).collect();
    for &key in &in_ram {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)));
    }

    server.restart();
    std::thread::sleep(Duration::from_millis(150));
    let moved = store.write_back(50).unwrap();
    assert_eq!(moved, 50);
    assert!(store.stats().tier.unwrap().available);
    let again = written_back(&store, &in_ram);
    assert_eq!(again.len(), 50);
    for &key in &again {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)));
    }
}

#[test]
fn pages_lost_while_a_cluster_fails_over_read_back_exact_once_a_replica_is_promoted() {
    if !available("store redis failover") {
        return;
    }
    let dir = TempDir::new("store-failover");
    let mut cluster = RedisCluster::start_with_replicas(&dir, 3, 1);
    let (store, mut worker, keys) = store_holding_400_pages(cluster.url());
    assert_eq!(store.write_back(200).unwrap(), 200);
    let in_redis = written_back(&store, &keys);
    cluster.wait_replicated();

    let victim = cluster.masters()[0];
    let replica = cluster.replicas_of(victim)[0];
    let victim_slots = cluster.slots_of(victim);
    // The election is held back until the outage has been looked at.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-replica-no-failover")
        .arg("yes")
        .exec(&mut cluster.nodes[replica].connection())
        .unwrap();
    cluster.nodes[victim].kill();
    let mut out = Box::new([0u8; PAGE_SIZE]);
    let mut lost = Vec::new();
    for &key in &keys {
        match store.load(&mut worker, key, &mut out) {
            Ok(()) => assert_eq!(pages::identify(&out), Some((key, 0)), "key {key}"),
            Err(StoreError::PageLost { key: k, cause, .. }) => {
                assert_eq!((k, cause), (key, ReadFailure::Unavailable));
                lost.push(key);
            }
            Err(e) => panic!("key {key}: {e}"),
        }
    }
    assert!(
        !lost.is_empty() && lost.len() < in_redis.len(),
        "{} of {} written-back pages lost",
        lost.len(),
        in_redis.len()
    );
    assert!(lost.iter().all(|k| in_redis.contains(k)));
    let listed: Vec<u64> = store.lost_pages().into_iter().map(|(k, _)| k).collect();
    assert_eq!(listed, lost);

    redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-replica-no-failover")
        .arg("no")
        .exec(&mut cluster.nodes[replica].connection())
        .unwrap();
    cluster.wait_serves(replica, &victim_slots);
    for &key in &keys {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)), "key {key}");
    }
    assert!(store.lost_pages().is_empty(), "{:?}", store.lost_pages());
}
