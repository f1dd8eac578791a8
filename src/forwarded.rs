//! Who the client is behind a reverse proxy or load balancer: the address failed
//! authentications are counted against.
//!
//! A proxy's own address is the peer of every request it forwards, so counting failures by
//! peer would punish every client behind it for one misconfigured one. Only a peer the operator
//! trusts (`[server] trusted_proxies`, CIDR blocks; none by default) may say who the client is,
//! and only in the one header that proxy writes (`[server] forwarded_header`:
//! `X-Forwarded-For` by default, or `Forwarded`, RFC 7239). The other header is never read: a
//! proxy that appends to `X-Forwarded-For` passes a client's own `Forwarded` through untouched,
//! so believing whichever header is present would let the client name any address it likes.
//! Each trusted hop appends the address it received from, so the list is read from the right:
//! trusted hops are skipped and the first address that is not a trusted proxy is the client.
//! Whatever a client writes into the header itself is further left and never reached. An
//! untrusted peer's header is ignored.
//!
//! A foundation module: it imports nothing of floodgate's.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The one header the trusted proxies write the client's address into.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx, HAProxy, AWS ALB, most load balancers).
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// The proxies whose forwarding header is believed, and which header that is.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    blocks: Vec<IpNet>,
    header: ForwardedHeader,
}

impl TrustedProxies {
    /// Parses CIDR blocks (`10.0.0.0/8`) or single addresses; the index and text of the first
    /// that is neither.
    pub fn parse(blocks: &[String], header: ForwardedHeader) -> Result<Self, (usize, String)> {
        blocks
            .iter()
            .enumerate()
            .map(|(i, b)| parse_block(b).ok_or_else(|| (i, b.clone())))
            .collect::<Result<Vec<_>, _>>()
            .map(|blocks| Self { blocks, header })
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.blocks.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a request from `peer`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.blocks.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let hops = match self.header {
            ForwardedHeader::XForwardedFor => x_forwarded_for(headers),
            ForwardedHeader::Forwarded => forwarded_for(headers),
        };
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

fn parse_block(block: &str) -> Option<IpNet> {
    block
        .parse::<IpNet>()
        .or_else(|_| block.parse::<IpAddr>().map(IpNet::from))
        .ok()
}

/// The indexes of blocks that trust every address (`0.0.0.0/0`, `::/0`): any client could
/// then name itself in the header, and each address it names gets its own allowance of
/// failed authentications. Worth a warning, not a refusal (a gateway reachable only through
/// its proxies may mean it).
pub fn trusts_everyone(blocks: &[String]) -> Vec<usize> {
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| parse_block(b).is_some_and(|net| net.prefix_len() == 0))
        .map(|(i, _)| i)
        .collect()
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

    fn trusting(blocks: &[&str], header: ForwardedHeader) -> TrustedProxies {
        let blocks: Vec<String> = blocks.iter().map(|b| b.to_string()).collect();
        TrustedProxies::parse(&blocks, header).expect("valid")
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let proxies = trusting(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(proxies.client(ip("198.51.100.7"), &h), ip("198.51.100.7"));
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn behind_trusted_proxies_the_first_untrusted_hop_from_the_right_is_the_client() {
        let xff = trusting(
            &["10.0.0.0/8", "2001:db8::1"],
            ForwardedHeader::XForwardedFor,
        );
        // The client wrote a fake address first; the proxies appended the real one.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.1.1.1")]);
        assert_eq!(xff.client(ip("10.0.0.2"), &h), ip("203.0.113.9"));
        // Several header lines are one list, in order.
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "203.0.113.9, 10.1.1.1"),
        ]);
        assert_eq!(xff.client(ip("10.0.0.2"), &h), ip("203.0.113.9"));
        let fwd = trusting(&["10.0.0.0/8", "2001:db8::1"], ForwardedHeader::Forwarded);
        let h = headers(&[(
            "forwarded",
            "for=1.2.3.4, for=\"[2001:db8::7]:4711\";proto=https, for=10.9.9.9:80",
        )]);
        assert_eq!(fwd.client(ip("::ffff:10.0.0.2"), &h), ip("2001:db8::7"));
        // Only proxies: the last one's word.
        let h = headers(&[("forwarded", "for=10.2.2.2")]);
        assert_eq!(fwd.client(ip("10.0.0.2"), &h), ip("10.2.2.2"));
        // An unreadable hop ends the walk: the hop after it is the client.
        let h = headers(&[("forwarded", "for=unknown, for=10.3.3.3")]);
        assert_eq!(fwd.client(ip("10.0.0.2"), &h), ip("10.3.3.3"));
        // No header: the proxy itself.
        assert_eq!(
            xff.client(ip("10.0.0.2"), &HeaderMap::new()),
            ip("10.0.0.2")
        );
    }

    /// A proxy that appends to `X-Forwarded-For` passes the client's own `Forwarded` through:
    /// read, it would let the client pick its address (and so its failure allowance).
    #[test]
    fn only_the_configured_header_is_read() {
        let xff = trusting(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[
            ("forwarded", "for=1.2.3.4"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(xff.client(ip("10.0.0.2"), &h), ip("203.0.113.9"));
        let only_forwarded = headers(&[("forwarded", "for=1.2.3.4")]);
        assert_eq!(
            xff.client(ip("10.0.0.2"), &only_forwarded),
            ip("10.0.0.2"),
            "no X-Forwarded-For: the proxy, never the client's Forwarded"
        );
        let fwd = trusting(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        assert_eq!(fwd.client(ip("10.0.0.2"), &h), ip("1.2.3.4"));
        let only_xff = headers(&[("x-forwarded-for", "5.5.5.5")]);
        assert_eq!(fwd.client(ip("10.0.0.2"), &only_xff), ip("10.0.0.2"));
    }

    #[test]
    fn blocks_that_are_not_addresses_are_refused() {
        let blocks = ["10.0.0.0/8".to_string(), "ten".to_string()];
        assert_eq!(
            TrustedProxies::parse(&blocks, ForwardedHeader::default()).err(),
            Some((1, "ten".into()))
        );
    }

    #[test]
    fn blocks_that_trust_every_address_are_found() {
        let blocks: Vec<String> = ["10.0.0.0/8", "0.0.0.0/0", "::/0", "::1", "junk"]
            .iter()
            .map(|b| b.to_string())
            .collect();
        assert_eq!(trusts_everyone(&blocks), vec![1, 2]);
    }
}
