//! The Redis tier's credentials and TLS against real `redis-server`
//! processes: a password from a private file or from the URL opens a server
//! started with `requirepass`, and no description, error or down cause ever
//! holds it (a wrong password, a server killed); `rediss://` against a server
//! with a throwaway CA and certificates made here (rcgen), checked against
//! that CA, with a client certificate where the server asks for one, and
//! refused without the CA or without the client certificate. Skipped, with a
//! message, where redis-server is not installed.

mod redis_server;

use redis_server::{available, free_port, RedisServer, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zpage_tier::{
    RedisConfig, RedisPassword, RedisTier, RedisTls, Tier, TierError, READ_BUFFER_BYTES,
};

const PASSWORD: &str = "Tr0ub4dor-and-3-horses";

fn config(url: &str) -> RedisConfig {
    let mut config = RedisConfig::new(url);
    config.timeout = Duration::from_millis(500);
    config.retry_interval = Duration::from_millis(50);
    config
}

fn private_file(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Puts a blob and reads it back.
fn round_trip(tier: &RedisTier) {
    let blob: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    let r = tier.put(9, &blob).unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let n = tier.get(r, 9, &mut buf).unwrap();
    assert_eq!(&buf[..n], &blob[..]);
}

fn assert_hidden(text: &str) {
    assert!(!text.contains(PASSWORD), "the password shows in: {text}");
}

#[test]
fn a_password_from_a_file_or_the_url_opens_the_server_and_never_shows() {
    if !available("redis password") {
        return;
    }
    let dir = TempDir::new("redis-auth");
    let mut server = RedisServer::start(&dir, &["--requirepass", PASSWORD]);

    // From a private file.
    let file = private_file(&dir.0, "password", format!("{PASSWORD}\n").as_bytes());
    let mut from_file = config(&server.url());
    from_file.password = Some(RedisPassword::from_file(&file).unwrap());
    assert_hidden(&format!("{from_file:?}"));
    let tier = RedisTier::new(from_file).unwrap();
    round_trip(&tier);
    assert!(
        tier.describe().contains(":***@127.0.0.1"),
        "{}",
        tier.describe()
    );
    assert_hidden(tier.describe());

    // In the URL: taken out of it, still used.
    let in_url = config(&format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port));
    assert_hidden(&format!("{in_url:?}"));
    let url_tier = RedisTier::new(in_url).unwrap();
    round_trip(&url_tier);
    assert_hidden(url_tier.describe());

    // Both: refused, naming neither.
    let mut twice = config(&format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port));
    twice.password = Some(RedisPassword::new(PASSWORD));
    let err = RedisTier::new(twice).unwrap_err().to_string();
    assert!(err.contains("given twice"), "{err}");
    assert_hidden(&err);

    // A wrong password: the tier is down, and says why without the password.
    let wrong = format!("{PASSWORD}-wrong");
    let wrong_tier = RedisTier::new(config(&format!(
        "redis://:{wrong}@127.0.0.1:{}",
        server.port
    )))
    .unwrap();
    let stats = wrong_tier.stats();
    assert!(!stats.available);
    let cause = stats.down_cause.unwrap();
    assert!(!cause.contains(&wrong), "{cause}");
    let err = wrong_tier.put(1, &[1; 100]).unwrap_err().to_string();
    assert!(!err.contains(&wrong), "{err}");

    // The server killed: every message the tier makes, none with the password.
    server.kill();
    std::thread::sleep(Duration::from_millis(60));
    let err = tier.put(2, &[2; 100]).unwrap_err();
    assert!(
        matches!(err, TierError::Io { .. } | TierError::Unavailable { .. }),
        "{err}"
    );
    assert_hidden(&err.to_string());
    assert_hidden(&tier.stats().down_cause.unwrap());
}

/// A CA, and certificates it signed for the server (127.0.0.1) and a client.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "zpage test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let signed = |names: Vec<String>, common_name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = signed(
        vec!["127.0.0.1".into(), "localhost".into()],
        "zpage test server",
    );
    let (client_cert, client_key) = signed(vec![], "zpage test client");
    Pki {
        ca: private_file(dir, "ca.crt", ca.pem().as_bytes()),
        server_cert: private_file(dir, "server.crt", server_cert.as_bytes()),
        server_key: private_file(dir, "server.key", server_key.as_bytes()),
        client_cert: private_file(dir, "client.crt", client_cert.as_bytes()),
        client_key: private_file(dir, "client.key", client_key.as_bytes()),
    }
}

#[test]
fn rediss_checks_the_server_against_its_ca_and_presents_a_client_certificate() {
    if !available("rediss") {
        return;
    }
    let dir = TempDir::new("redis-tls");
    let pki = make_pki(&dir.0);
    let tls_port = free_port().to_string();
    // The plain port stays open for the helper's readiness check; the tier
    // uses the TLS port only.
    let _server = RedisServer::start(
        &dir,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            pki.server_cert.to_str().unwrap(),
            "--tls-key-file",
            pki.server_key.to_str().unwrap(),
            "--tls-ca-cert-file",
            pki.ca.to_str().unwrap(),
            "--tls-auth-clients",
            "yes",
            "--requirepass",
            PASSWORD,
        ],
    );
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let full = RedisTls {
        ca_file: Some(pki.ca.clone()),
        cert_file: Some(pki.client_cert.clone()),
        key_file: Some(pki.client_key.clone()),
    };
    let tls_config = |tls: RedisTls| {
        let mut c = config(&url);
        c.password = Some(RedisPassword::new(PASSWORD));
        c.tls = tls;
        c
    };

    let tier = RedisTier::new(tls_config(full.clone())).unwrap();
    assert!(tier.stats().available, "{:?}", tier.stats().down_cause);
    round_trip(&tier);
    assert_hidden(tier.describe());

    // The system's store does not know this CA: the handshake fails.
    let unknown_ca = RedisTier::new(tls_config(RedisTls {
        ca_file: None,
        ..full.clone()
    }))
    .unwrap();
    assert!(!unknown_ca.stats().available);
    assert!(unknown_ca.put(1, &[1; 64]).is_err());

    // The server asks for a client certificate (tls-auth-clients yes).
    let anonymous = RedisTier::new(tls_config(RedisTls {
        ca_file: Some(pki.ca.clone()),
        ..RedisTls::default()
    }))
    .unwrap();
    assert!(!anonymous.stats().available);

    // A client key others may read is refused before connecting.
    std::fs::set_permissions(&pki.client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = RedisTier::new(tls_config(full)).unwrap_err().to_string();
    assert!(
        err.contains("client key") && err.contains("chmod 600"),
        "{err}"
    );

    // Certificate checks cannot be switched off.
    let err = RedisTier::new(config(&format!("{url}#insecure")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("always checked"), "{err}");
}
