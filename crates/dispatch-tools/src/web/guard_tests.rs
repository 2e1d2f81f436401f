//! The guard against hostile URLs: every form of a local address, every scheme but http(s),
//! and redirects from an allow-listed server into the machine or the LAN.

use std::net::IpAddr;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use url::Url;

use super::*;
use crate::web::client::{FetchError, Outgoing, WebClient};
use crate::web::test_server::{Reply, TestServer};

fn get(url: &str) -> Outgoing {
    Outgoing {
        method: Method::GET,
        url: Url::parse(url).unwrap(),
        headers: HeaderMap::new(),
        body: None,
        secret_headers: Vec::new(),
    }
}

/// The refusal `policy` gives `url`, through the whole client (resolver included).
async fn refusal(policy: &Arc<NetPolicy>, url: &str) -> Refusal {
    let client = WebClient::new(policy.clone()).unwrap();
    match client.send(get(url)).await {
        Err(FetchError::Refused(r)) => r,
        Err(FetchError::Failed(m)) => panic!("{url}: failed instead of refused: {m}"),
        Ok(f) => panic!("{url}: reached {} ({})", f.url, f.response.status()),
    }
}

#[tokio::test]
async fn hostile_urls_are_refused_by_the_rule_that_names_them() {
    let policy = Arc::new(NetPolicy::default());
    let table: &[(&str, Rule)] = &[
        ("http://127.0.0.1/", Rule::Loopback),
        ("https://127.0.0.1:8443/admin", Rule::Loopback),
        ("http://2130706433/", Rule::Loopback),
        ("http://0x7f.1/", Rule::Loopback),
        ("http://0177.0.0.1/", Rule::Loopback),
        ("http://127.1/", Rule::Loopback),
        ("http://127.0.0.1./", Rule::Loopback),
        ("http://0x7f000001/", Rule::Loopback),
        ("http://127.255.255.254/", Rule::Loopback),
        ("http://0/", Rule::Unspecified),
        ("http://0.0.0.0:8080/", Rule::Unspecified),
        ("http://[::]/", Rule::Unspecified),
        ("http://[::1]/", Rule::Loopback),
        ("http://[0:0:0:0:0:0:0:1]:80/", Rule::Loopback),
        ("http://[::ffff:127.0.0.1]/", Rule::Loopback),
        ("http://[::ffff:7f00:1]/", Rule::Loopback),
        ("http://[::127.0.0.1]/", Rule::Loopback),
        ("http://[::ffff:10.0.0.1]/", Rule::Private),
        ("http://[::ffff:169.254.169.254]/", Rule::LinkLocal),
        ("http://[64:ff9b::10.0.0.1]/", Rule::Private),
        ("http://[64:ff9b::a9fe:a9fe]/", Rule::LinkLocal),
        ("http://[2002:7f00:1::1]/", Rule::Loopback),
        ("http://169.254.169.254/latest/meta-data/", Rule::LinkLocal),
        ("http://10.0.0.5/", Rule::Private),
        ("http://0x0a.0.0.1/", Rule::Private),
        ("http://172.16.0.1/", Rule::Private),
        ("http://172.31.255.255/", Rule::Private),
        ("http://192.168.1.1/", Rule::Private),
        ("http://100.64.0.1/", Rule::SharedAddress),
        ("http://0.1.2.3/", Rule::ThisNetwork),
        ("http://224.0.0.1/", Rule::Multicast),
        ("http://255.255.255.255/", Rule::Broadcast),
        ("http://192.0.2.1/", Rule::Documentation),
        ("http://198.18.0.1/", Rule::Benchmark),
        ("http://240.0.0.1/", Rule::Reserved),
        ("http://[fe80::1]/", Rule::LinkLocal),
        ("http://[fc00::1]/", Rule::UniqueLocal),
        ("http://[fd12:3456::1]/", Rule::UniqueLocal),
        ("http://[ff02::1]/", Rule::Multicast),
        ("http://[2001:db8::1]/", Rule::Documentation),
        // Names resolved through /etc/hosts, checked in the resolver.
        ("http://localhost/", Rule::Loopback),
        ("http://LOCALHOST:8080/x", Rule::Loopback),
        ("http://LocalHost/", Rule::Loopback),
        // Userinfo: the host is what follows the @.
        ("http://example.com@127.0.0.1/", Rule::Loopback),
        ("http://example.com:80@10.1.2.3/", Rule::Private),
        ("http://user:pass@example.com/", Rule::Userinfo),
        ("file:///etc/passwd", Rule::Scheme),
        ("ftp://example.com/file", Rule::Scheme),
        ("gopher://127.0.0.1:70/_stats", Rule::Scheme),
        ("data:text/plain,hello", Rule::Scheme),
        ("ws://example.com/socket", Rule::Scheme),
    ];
    assert!(table.len() >= 30);
    let mut wrong = Vec::new();
    for (url, rule) in table {
        let r = refusal(&policy, url).await;
        let named = format!("(rule: {})", rule.name());
        if r.rule != *rule || !r.message.contains(&named) || !r.message.starts_with("refused: ") {
            wrong.push(format!("{url}: {:?} {}", r.rule, r.message));
        }
    }
    assert_eq!(wrong, Vec::<String>::new());
}

#[tokio::test]
async fn a_refusal_names_the_address_the_rule_and_the_allow_list() {
    let policy = Arc::new(NetPolicy::default());
    assert_eq!(
        refusal(&policy, "http://10.0.0.5/").await.message,
        "refused: http://10.0.0.5/ resolves to 10.0.0.5, a private address (a local network) (rule: private); tooldispatch only reaches public hosts. If the user trusts this host, they can add it to net.allow_hosts in the config file (or TOOLDISPATCH_ALLOW_HOSTS)."
    );
    // A name refused in the resolver is reported with the URL the model asked for.
    assert_eq!(
        refusal(&policy, "http://localhost:9/health").await.message,
        "refused: http://localhost:9/health resolves to 127.0.0.1, a loopback address (this machine) (rule: loopback); tooldispatch only reaches public hosts. If the user trusts this host, they can add it to net.allow_hosts in the config file (or TOOLDISPATCH_ALLOW_HOSTS)."
    );
}

#[tokio::test]
async fn a_trailing_dot_name_is_refused_too() {
    // `localhost.` may or may not resolve here; either way nothing is reached.
    let r = refusal(&Arc::new(NetPolicy::default()), "http://localhost./").await;
    assert!(matches!(r.rule, Rule::Loopback | Rule::Dns), "{r:?}");
}

#[test]
fn public_addresses_pass() {
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "64:ff9b::808:808",
        "::ffff:8.8.8.8",
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(classify(ip), None, "{ip}");
    }
}

#[test]
fn allow_list_entries_match_host_case_and_dot_insensitively_with_an_optional_port() {
    let policy =
        NetPolicy::from_env_str(" Intranet.Example. , 127.1:8080, [::1]:3000,fd00::7 ,").unwrap();
    assert!(policy.allows("intranet.example", 80));
    assert!(policy.allows("INTRANET.EXAMPLE.", 443));
    assert!(policy.allows("127.0.0.1", 8080));
    assert!(!policy.allows("127.0.0.1", 8081));
    assert!(policy.allows("[::1]", 3000));
    assert!(!policy.allows("[::1]", 3001));
    assert!(policy.allows("[fd00::7]", 1));
    assert!(!policy.allows("other.example", 80));
    for bad in ["http://x.example/", "x.example/path", "a@b", "host:99999"] {
        assert_eq!(
            NetPolicy::from_list(&[bad.to_string()]).unwrap_err(),
            BadAllowEntry(bad.to_string()),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn an_allow_listed_host_is_reached_on_its_port_only() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "hello")).await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port()]).unwrap());
    let client = WebClient::new(policy.clone()).unwrap();
    let mut fetched = client.send(get(&server.url("/"))).await.unwrap();
    assert_eq!(fetched.response.status(), 200);
    assert_eq!(fetched.response.chunk().await.unwrap().unwrap(), "hello");
    // The same host on another port is not allow-listed.
    let other = format!("http://127.0.0.1:{}/", server.addr.port() + 1);
    assert_eq!(refusal(&policy, &other).await.rule, Rule::Loopback);
}

#[tokio::test]
async fn a_name_allow_listed_on_another_port_is_checked_before_the_request() {
    let policy = Arc::new(NetPolicy::from_list(&["localhost:1".to_string()]).unwrap());
    assert_eq!(
        refusal(&policy, "http://localhost:2/").await.rule,
        Rule::Loopback
    );
}

#[tokio::test]
async fn redirects_from_an_allow_listed_server_into_the_machine_or_the_lan_are_refused() {
    // A second server on 127.0.0.2: it must never see a request.
    let inner =
        TestServer::start_on("127.0.0.2:0", |_| Reply::new(200, "text/plain", "secret")).await;
    let inner_url = inner.url("/");
    let server = TestServer::start(move |seen| match seen.path.as_str() {
        "/to-127.0.0.2" => Reply::redirect(302, &inner_url),
        "/to-lan" => Reply::redirect(301, "http://10.0.0.7/admin"),
        "/to-localhost" => Reply::redirect(307, "http://localhost/"),
        "/to-metadata" => Reply::redirect(308, "http://169.254.169.254/latest/meta-data/"),
        "/to-file" => Reply::redirect(302, "file:///etc/passwd"),
        _ => Reply::new(404, "text/plain", "no"),
    })
    .await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port()]).unwrap());
    let cases = [
        ("/to-127.0.0.2", Rule::Loopback),
        ("/to-lan", Rule::Private),
        ("/to-localhost", Rule::Loopback),
        ("/to-metadata", Rule::LinkLocal),
        ("/to-file", Rule::Scheme),
    ];
    for (path, rule) in cases {
        let r = refusal(&policy, &server.url(path)).await;
        assert_eq!(r.rule, rule, "{path}: {}", r.message);
    }
    assert_eq!(inner.requests().len(), 0);
    assert_eq!(server.requests().len(), cases.len());
    let r = refusal(&policy, &server.url("/to-127.0.0.2")).await;
    assert_eq!(
        r.message,
        format!(
            "refused: {} resolves to 127.0.0.2, a loopback address (this machine) (rule: loopback); {ALLOW_HINT}",
            inner.url("/")
        )
    );
}

#[tokio::test]
async fn more_than_ten_redirects_are_refused() {
    let server = TestServer::start(|seen| {
        let n: u32 = seen.path.trim_start_matches('/').parse().unwrap_or(0);
        Reply::redirect(302, &format!("/{}", n + 1))
    })
    .await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port()]).unwrap());
    let r = refusal(&policy, &server.url("/0")).await;
    assert_eq!(r.rule, Rule::TooManyRedirects, "{}", r.message);
    // The first request and ten redirects were followed, no more.
    assert_eq!(server.requests().len(), MAX_REDIRECTS + 1);
}

#[tokio::test]
async fn credentials_stay_on_their_origin_across_redirects() {
    let other = TestServer::start(|_| Reply::new(200, "text/plain", "other")).await;
    let other_url = other.url("/landing");
    let server = TestServer::start(move |seen| match seen.path.as_str() {
        "/same" => Reply::redirect(302, "/landing"),
        "/away" => Reply::redirect(302, &other_url),
        _ => Reply::new(200, "text/plain", "ok"),
    })
    .await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port(), other.host_port()]).unwrap());
    let client = WebClient::new(policy).unwrap();
    let with_token = |path: &str| {
        let mut req = get(&server.url(path));
        req.headers
            .insert(AUTHORIZATION, HeaderValue::from_static("Bearer t0k"));
        req.headers
            .insert("x-api-key", HeaderValue::from_static("k3y"));
        req.secret_headers.push("x-api-key".parse().unwrap());
        req
    };
    client.send(with_token("/same")).await.unwrap();
    client.send(with_token("/away")).await.unwrap();
    let seen = server.requests();
    let landing = seen.iter().find(|s| s.path == "/landing").unwrap();
    assert_eq!(landing.header("authorization"), Some("Bearer t0k"));
    assert_eq!(landing.header("x-api-key"), Some("k3y"));
    let away = &other.requests()[0];
    assert_eq!(away.path, "/landing");
    assert_eq!(away.header("authorization"), None);
    assert_eq!(away.header("x-api-key"), None);
}

#[tokio::test]
async fn see_other_turns_a_post_into_a_get_and_307_keeps_it() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/303" => Reply::redirect(303, "/done"),
        "/307" => Reply::redirect(307, "/done"),
        _ => Reply::new(200, "text/plain", "done"),
    })
    .await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port()]).unwrap());
    let client = WebClient::new(policy).unwrap();
    for path in ["/303", "/307"] {
        let mut req = get(&server.url(path));
        req.method = Method::POST;
        req.body = Some(b"payload".to_vec());
        client.send(req).await.unwrap();
    }
    let done: Vec<(String, Vec<u8>)> = server
        .requests()
        .into_iter()
        .filter(|s| s.path == "/done")
        .map(|s| (s.method, s.body))
        .collect();
    assert_eq!(
        done,
        vec![
            ("GET".to_string(), Vec::new()),
            ("POST".to_string(), b"payload".to_vec())
        ]
    );
}

#[tokio::test]
async fn the_resolver_hands_back_no_address_it_did_not_check() {
    let resolver = GuardedResolver::new(Arc::new(NetPolicy::default()));
    let err = match resolver.resolve("localhost".parse().unwrap()).await {
        Err(e) => e,
        Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
    };
    let r = refusal_in(err.as_ref()).unwrap();
    assert_eq!(
        (r.rule, r.address),
        (Rule::Loopback, Some("127.0.0.1".parse().unwrap()))
    );
    // Allow-listed: the same name resolves.
    let allowing = GuardedResolver::new(Arc::new(
        NetPolicy::from_list(&["localhost".to_string()]).unwrap(),
    ));
    let addrs: Vec<IpAddr> = match allowing.resolve("localhost".parse().unwrap()).await {
        Ok(a) => a.map(|a| a.ip()).collect(),
        Err(e) => panic!("{e}"),
    };
    assert!(
        addrs.contains(&"127.0.0.1".parse::<IpAddr>().unwrap()),
        "{addrs:?}"
    );
}
