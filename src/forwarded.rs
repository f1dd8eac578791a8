//! Who the client is behind a reverse proxy or load balancer: the address failed
//! authentications are counted against.
//!
//! A proxy's own address is the peer of every request it forwards, so counting failures by
//! peer would punish every client behind it for one misconfigured one. Only a peer the operator
//! trusts (`[server] trusted_proxies`, CIDR blocks; none by default) may say who the client is,
//! in `Forwarded` (RFC 7239) or, when that is absent, `X-Forwarded-For`. Each trusted hop
//! appends the address it received from, so the list is read from the right: trusted hops are
//! skipped and the first address that is not a trusted proxy is the client. Whatever a client
//! writes into the header itself is further left and never reached. An untrusted peer's header
//! is ignored.
//!
//! A foundation module: it imports nothing of floodgate's.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The proxies whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses CIDR blocks (`10.0.0.0/8`) or single addresses; the index and text of the first
    /// that is neither.
    pub fn parse(blocks: &[String]) -> Result<Self, (usize, String)> {
        blocks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                b.parse::<IpNet>()
                    .or_else(|_| b.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| (i, b.clone()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a request from `peer`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.0.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let hops = forwarded_for(headers).or_else(|| x_forwarded_for(headers));
        let Some(hops) = hops else {
            return peer;
        };
        // From the nearest hop back: the first that is not one of ours is the client. A hop
        // that cannot be read ends the walk there (everything before it is the client's word).
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) if self.trusts(*ip) => client = *ip,
                Some(ip) => return *ip,
                None => return client,
            }
        }
        client
    }
}

/// IPv4-mapped IPv6 addresses are the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The `for=` addresses of every `Forwarded` element, in order (`None` for one that is not an
/// address: `unknown`, an obfuscated name).
fn forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut hops = Vec::new();
    let mut any = false;
    for value in headers.get_all("forwarded") {
        any = true;
        let Ok(text) = value.to_str() else {
            hops.push(None);
            continue;
        };
        for element in text.split(',') {
            let node = element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| value.trim().trim_matches('"'))
            });
            hops.push(node.and_then(node_address));
        }
    }
    any.then_some(hops)
}

/// The addresses of `X-Forwarded-For`, in order.
fn x_forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut hops = Vec::new();
    let mut any = false;
    for value in headers.get_all("x-forwarded-for") {
        any = true;
        let Ok(text) = value.to_str() else {
            hops.push(None);
            continue;
        };
        hops.extend(text.split(',').map(|a| node_address(a.trim())));
    }
    any.then_some(hops)
}

/// An address as a node is written: `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`, `2001:db8::1`.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok().map(canonical);
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    let (host, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().expect("value"));
        }
        h
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into()]).expect("valid");
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(proxies.client(ip("198.51.100.7"), &h), ip("198.51.100.7"));
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn behind_trusted_proxies_the_first_untrusted_hop_from_the_right_is_the_client() {
        let proxies =
            TrustedProxies::parse(&["10.0.0.0/8".into(), "2001:db8::1".into()]).expect("valid");
        // The client wrote a fake address first; the proxies appended the real one.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.1.1.1")]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &h), ip("203.0.113.9"));
        let h = headers(&[(
            "forwarded",
            "for=1.2.3.4, for=\"[2001:db8::7]:4711\";proto=https, for=10.9.9.9:80",
        )]);
        assert_eq!(proxies.client(ip("::ffff:10.0.0.2"), &h), ip("2001:db8::7"));
        // Forwarded wins over X-Forwarded-For; only proxies, then the last one's word.
        let h = headers(&[
            ("forwarded", "for=10.2.2.2"),
            ("x-forwarded-for", "5.5.5.5"),
        ]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &h), ip("10.2.2.2"));
        // An unreadable hop ends the walk: the hop after it is the client.
        let h = headers(&[("forwarded", "for=unknown, for=10.3.3.3")]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &h), ip("10.3.3.3"));
        // No header: the proxy itself.
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &HeaderMap::new()),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn blocks_that_are_not_addresses_are_refused() {
        assert_eq!(
            TrustedProxies::parse(&["10.0.0.0/8".into(), "ten".into()]).err(),
            Some((1, "ten".into()))
        );
    }
}
