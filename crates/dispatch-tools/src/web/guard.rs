//! The network guard every web tool goes through (DESIGN §6): http and https only, and never
//! an address inside the user's machine or network unless the user allow-listed the host.
//!
//! Where the check happens decides whether it can be walked around:
//! - A host written as an IP address (in any form the `url` crate normalises: `2130706433`,
//!   `0x7f.1`, `0177.0.0.1`, `[::ffff:127.0.0.1]`) is checked before the request; reqwest
//!   connects to such a host without resolving it.
//! - A host name is checked inside the client's resolver ([`GuardedResolver`]): the addresses it
//!   checks are the very addresses the connection uses, so a name that resolves to a public
//!   address for a first look and to 127.0.0.1 for the connection (DNS rebinding) gains nothing.
//!   That is why the guard plugs into reqwest's `dns::Resolve` rather than resolving first and
//!   pinning with `resolve_to_addrs`: pinning needs a new client per host, and a resolver covers
//!   every connection the client ever opens, redirects included.
//! - Redirects are followed by the caller, one hop at a time (see `client.rs`), so every hop
//!   meets the same checks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Redirect hops followed before giving up.
pub const MAX_REDIRECTS: usize = 10;
/// Largest request body sent.
pub const MAX_REQUEST_BODY: usize = 10 * 1024 * 1024;
/// Largest total size of request headers sent, and of response headers accepted.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Where the user can allow a host, quoted in every refusal that an allow-list entry would lift.
const ALLOW_HINT: &str = "tooldispatch only reaches public hosts. If the user trusts this host, they can add it to net.allow_hosts in the config file (or TOOLDISPATCH_ALLOW_HOSTS).";

/// What the guard allows besides public hosts, and its limits.
#[derive(Clone, Debug)]
pub struct NetPolicy {
    allow_hosts: Vec<AllowedHost>,
    /// Redirect hops followed before the request fails.
    pub max_redirects: usize,
    /// Largest request body sent.
    pub max_request_body: usize,
    /// Largest total size of request or response headers.
    pub max_header_bytes: usize,
}

/// One allow-list entry: a host, on any port or on one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AllowedHost {
    /// Lower-case, without a trailing dot; an IP address in its canonical text form.
    host: String,
    port: Option<u16>,
}

/// An allow-list entry that is not `host` or `host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadAllowEntry(pub String);

impl fmt::Display for BadAllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "net.allow_hosts entry {:?} is not a host or host:port (examples: intranet.example, 10.0.0.5:8080, [::1]:3000)",
            self.0
        )
    }
}

impl std::error::Error for BadAllowEntry {}

impl Default for NetPolicy {
    /// Public hosts only.
    fn default() -> Self {
        NetPolicy {
            allow_hosts: Vec::new(),
            max_redirects: MAX_REDIRECTS,
            max_request_body: MAX_REQUEST_BODY,
            max_header_bytes: MAX_HEADER_BYTES,
        }
    }
}

impl NetPolicy {
    /// A policy allowing these `host` or `host:port` entries (config `net.allow_hosts`).
    pub fn from_list(entries: &[String]) -> Result<NetPolicy, BadAllowEntry> {
        let mut policy = NetPolicy::default();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            policy.allow_hosts.push(parse_allow_entry(entry)?);
        }
        Ok(policy)
    }

    /// A policy from a comma-separated list (`TOOLDISPATCH_ALLOW_HOSTS`).
    pub fn from_env_str(list: &str) -> Result<NetPolicy, BadAllowEntry> {
        let entries: Vec<String> = list.split(',').map(str::to_string).collect();
        NetPolicy::from_list(&entries)
    }

    /// `host` (as the `url` crate prints it) on `port` is allow-listed.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normalise_host(host);
        self.allow_hosts
            .iter()
            .any(|a| a.host == host && a.port.is_none_or(|p| p == port))
    }

    /// `host` is allow-listed on some port (what the resolver, which sees no port, can know).
    fn allows_on_some_port(&self, host: &str) -> bool {
        let host = normalise_host(host);
        self.allow_hosts.iter().any(|a| a.host == host)
    }

    /// Check a URL before a request is sent to it: scheme, an IP-literal host, userinfo. A host
    /// name's addresses are checked when it is resolved ([`GuardedResolver`]), except for a
    /// host allow-listed on other ports only, which is resolved and checked here.
    pub async fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::new(
                Rule::Scheme,
                format!(
                    "refused: {url} uses the {}: scheme (rule: scheme); only http:// and https:// URLs are fetched. Use read_files for local files.",
                    url.scheme()
                ),
            ));
        }
        let Some(host) = url.host() else {
            return Err(Refusal::new(
                Rule::InvalidUrl,
                format!(
                    "refused: {url} has no host (rule: invalid_url); give a full URL such as https://example.com/path"
                ),
            ));
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let host_text = host.to_string();
        let allowed = self.allows(&host_text, port);
        match host {
            Host::Ipv4(ip) if !allowed => check_ip(url, IpAddr::V4(ip))?,
            Host::Ipv6(ip) if !allowed => check_ip(url, IpAddr::V6(ip))?,
            Host::Domain(name) if !allowed && self.allows_on_some_port(name) => {
                // The resolver lets this name through (it cannot see the port): check here.
                let addrs = lookup(name).await.map_err(|e| {
                    Refusal::new(
                        Rule::Dns,
                        format!("refused: {url}: the host {name} cannot be resolved ({e}) (rule: dns); check the host name"),
                    )
                })?;
                for addr in addrs {
                    check_ip(url, addr.ip())?;
                }
            }
            _ => {}
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::new(
                Rule::Userinfo,
                format!(
                    "refused: {} carries a user name or password before the host (rule: userinfo); credentials in URLs end up in logs. Send them in a header instead, e.g. Authorization: Bearer {{{{secret:NAME}}}}.",
                    redact_userinfo(url)
                ),
            ));
        }
        Ok(())
    }
}

/// Parse `host` or `host:port` the way URLs are parsed, so `127.1` and `127.0.0.1` are one entry.
fn parse_allow_entry(entry: &str) -> Result<AllowedHost, BadAllowEntry> {
    let bad = || BadAllowEntry(entry.to_string());
    if entry.contains(['/', '@', '?', '#']) || entry.contains("://") {
        return Err(bad());
    }
    // A bare IPv6 address (`::1`) has colons but no brackets.
    let text = match entry.parse::<Ipv6Addr>() {
        Ok(ip) => format!("http://[{ip}]/"),
        Err(_) => format!("http://{entry}/"),
    };
    let url = Url::parse(&text).map_err(|_| bad())?;
    let host = url.host_str().ok_or_else(bad)?;
    Ok(AllowedHost {
        host: normalise_host(host),
        port: url.port(),
    })
}

/// Compare hosts case-insensitively, ignoring a trailing dot and IPv6 brackets.
fn normalise_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The URL with its userinfo replaced, for messages.
fn redact_userinfo(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    format!("{shown} (as written, with userinfo)")
}

async fn lookup(host: &str) -> std::io::Result<Vec<SocketAddr>> {
    // A host in brackets is an IPv6 literal; lookup_host wants it bare.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Ok(tokio::net::lookup_host((bare, 0)).await?.collect())
}

/// Refuse `ip` when it is not a public address.
fn check_ip(url: &Url, ip: IpAddr) -> Result<(), Refusal> {
    match classify(ip) {
        None => Ok(()),
        Some(rule) => Err(Refusal::address(url.as_str(), ip, rule)),
    }
}

/// Which rule refuses `ip`, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<Rule> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Rule> {
    let [a, b, c, _] = ip.octets();
    let rule = if ip.is_unspecified() {
        Rule::Unspecified
    } else if a == 0 {
        Rule::ThisNetwork
    } else if ip.is_loopback() {
        Rule::Loopback
    } else if ip.is_private() {
        Rule::Private
    } else if ip.is_link_local() {
        Rule::LinkLocal
    } else if a == 100 && (b & 0b1100_0000) == 64 {
        Rule::SharedAddress
    } else if ip.is_broadcast() {
        Rule::Broadcast
    } else if ip.is_multicast() {
        Rule::Multicast
    } else if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113)
    {
        Rule::Documentation
    } else if a == 198 && (b & 0xfe) == 18 {
        Rule::Benchmark
    } else if (a, b, c) == (192, 0, 0) || a >= 240 || (a, b, c) == (192, 88, 99) {
        Rule::Reserved
    } else {
        return None;
    };
    Some(rule)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Rule> {
    if ip.is_unspecified() {
        return Some(Rule::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Rule::Loopback);
    }
    let seg = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (the deprecated compatible form) reach the v4 host.
    if seg[..5] == [0; 5] && seg[5] == 0xffff {
        return classify_v4(embedded(seg[6], seg[7]));
    }
    if seg[..6] == [0; 6] {
        // Compatible addresses are deprecated: refused even when the v4 part is public.
        return Some(classify_v4(embedded(seg[6], seg[7])).unwrap_or(Rule::Reserved));
    }
    // NAT64 (64:ff9b::/96): the gateway connects to the embedded v4 address.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return classify_v4(embedded(seg[6], seg[7]));
    }
    // 6to4 (2002::/16) carries the v4 address in bits 16..48.
    if seg[0] == 0x2002
        && let Some(rule) = classify_v4(embedded(seg[1], seg[2]))
    {
        return Some(rule);
    }
    let rule = if seg[0] & 0xff00 == 0xff00 {
        Rule::Multicast
    } else if seg[0] & 0xffc0 == 0xfe80 {
        Rule::LinkLocal
    } else if seg[0] & 0xfe00 == 0xfc00 || seg[0] & 0xffc0 == 0xfec0 {
        Rule::UniqueLocal
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 {
        Rule::Documentation
    } else if seg[0] == 0x2001 && seg[1] == 0x0002 && seg[2] == 0 {
        Rule::Benchmark
    } else if seg[0] & 0xe000 != 0x2000 || seg[..2] == [0x0064, 0xff9b] {
        // Outside global unicast 2000::/3, or local-use NAT64 64:ff9b:1::/48.
        Rule::Reserved
    } else {
        return None;
    };
    Some(rule)
}

/// Why the guard refused: a rule name a test (or a log) can match, and the message for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Scheme,
    InvalidUrl,
    Userinfo,
    Dns,
    Loopback,
    Private,
    LinkLocal,
    Unspecified,
    ThisNetwork,
    SharedAddress,
    Broadcast,
    Multicast,
    UniqueLocal,
    Documentation,
    Benchmark,
    Reserved,
    TooManyRedirects,
}

impl Rule {
    /// The rule's name as refusals print it (`rule: loopback`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::Scheme => "scheme",
            Rule::InvalidUrl => "invalid_url",
            Rule::Userinfo => "userinfo",
            Rule::Dns => "dns",
            Rule::Loopback => "loopback",
            Rule::Private => "private",
            Rule::LinkLocal => "link_local",
            Rule::Unspecified => "unspecified",
            Rule::ThisNetwork => "this_network",
            Rule::SharedAddress => "shared_address",
            Rule::Broadcast => "broadcast",
            Rule::Multicast => "multicast",
            Rule::UniqueLocal => "unique_local",
            Rule::Documentation => "documentation",
            Rule::Benchmark => "benchmark",
            Rule::Reserved => "reserved",
            Rule::TooManyRedirects => "too_many_redirects",
        }
    }

    /// What kind of address the rule refuses, in words.
    fn describes(self) -> &'static str {
        match self {
            Rule::Loopback => "a loopback address (this machine)",
            Rule::Private => "a private address (a local network)",
            Rule::LinkLocal => {
                "a link-local address (169.254.169.254 is the cloud metadata service)"
            }
            Rule::Unspecified => "the unspecified address (it means this machine)",
            Rule::ThisNetwork => "an address in 0.0.0.0/8 (this network)",
            Rule::SharedAddress => "a carrier-grade NAT address (100.64.0.0/10)",
            Rule::Broadcast => "the broadcast address",
            Rule::Multicast => "a multicast address",
            Rule::UniqueLocal => "a unique-local IPv6 address (a local network)",
            Rule::Documentation => "a documentation-only address",
            Rule::Benchmark => "a benchmarking address (198.18.0.0/15)",
            _ => "a reserved address",
        }
    }
}

/// A refused URL or address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub rule: Rule,
    pub message: String,
    /// The refused address, when an address was refused.
    pub address: Option<IpAddr>,
}

impl Refusal {
    /// A refusal by `rule`, explained by `message`.
    pub fn new(rule: Rule, message: String) -> Self {
        Refusal {
            rule,
            message,
            address: None,
        }
    }

    /// The same refusal naming the URL the model asked for rather than the bare host name the
    /// resolver saw.
    pub fn for_url(self, url: &Url) -> Self {
        match self.address {
            Some(ip) => Refusal::address(url.as_str(), ip, self.rule),
            None => self,
        }
    }

    /// `target` resolves to `ip`, which `rule` refuses.
    fn address(target: &str, ip: IpAddr, rule: Rule) -> Self {
        Refusal {
            rule,
            message: format!(
                "refused: {target} resolves to {ip}, {} (rule: {}); {ALLOW_HINT}",
                rule.describes(),
                rule.name()
            ),
            address: Some(ip),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// reqwest's resolver for the web tools: resolves with the system resolver and hands back the
/// addresses only when every one of them is public (or the host is allow-listed). A name that
/// mixes public and private addresses is refused whole: it is either misconfigured or a trap.
pub struct GuardedResolver {
    policy: Arc<NetPolicy>,
}

impl GuardedResolver {
    /// A resolver enforcing `policy`.
    pub fn new(policy: Arc<NetPolicy>) -> Self {
        GuardedResolver { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = lookup(&host).await.map_err(|e| {
                Box::new(Refusal::new(
                    Rule::Dns,
                    format!("refused: the host {host} cannot be resolved ({e}) (rule: dns); check the host name"),
                )) as Box<dyn std::error::Error + Send + Sync>
            })?;
            if !policy.allows_on_some_port(&host) {
                for addr in &addrs {
                    if let Some(rule) = classify(addr.ip()) {
                        return Err(Box::new(Refusal::address(&host, addr.ip(), rule))
                            as Box<dyn std::error::Error + Send + Sync>);
                    }
                }
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The guard's refusal somewhere in an error's source chain (a resolver error reaches the
/// caller wrapped by hyper and reqwest).
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<Refusal> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(r) = e.downcast_ref::<Refusal>() {
            return Some(r.clone());
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
