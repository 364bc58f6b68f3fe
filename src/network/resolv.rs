//! The pod's DNS settings, from its /etc/resolv.conf (KubeVirt:
//! pkg/network/dns), handed to the guest by DHCP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// KubeVirt's fall-backs when resolv.conf names no server or domain.
pub const DEFAULT_DNS: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);
pub const DEFAULT_SEARCH_DOMAIN: &str = "cluster.local";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDns {
    pub ipv4: Vec<Ipv4Addr>,
    pub ipv6: Vec<Ipv6Addr>,
    pub search: Vec<String>,
    /// Search domains that were dropped as invalid.
    pub rejected: Vec<String>,
}

pub fn parse(content: &str) -> PodDns {
    let mut dns = PodDns {
        ipv4: Vec::new(),
        ipv6: Vec::new(),
        search: Vec::new(),
        rejected: Vec::new(),
    };
    for line in content.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                let (Some(server), None) = (words.next(), words.next()) else {
                    continue;
                };
                match server.parse::<IpAddr>() {
                    Ok(IpAddr::V4(v4)) => dns.ipv4.push(v4),
                    Ok(IpAddr::V6(v6)) => dns.ipv6.push(v6),
                    Err(_) => {}
                }
            }
            // The last search line wins (resolv.conf(5)); KubeVirt keeps
            // them all, which is the same for a well-formed file.
            Some("search") | Some("domain") => {
                for domain in words {
                    let domain = domain.to_ascii_lowercase();
                    if is_valid_search_domain(&domain) {
                        if !dns.search.contains(&domain) {
                            dns.search.push(domain);
                        }
                    } else {
                        dns.rejected.push(domain);
                    }
                }
            }
            _ => {}
        }
    }
    if dns.ipv4.is_empty() && dns.ipv6.is_empty() {
        dns.ipv4.push(DEFAULT_DNS);
    }
    if dns.search.is_empty() {
        dns.search.push(DEFAULT_SEARCH_DOMAIN.to_string());
    }
    dns
}

/// A DNS name of letters, digits, '-' and '_' labels (KubeVirt's check).
pub fn is_valid_search_domain(domain: &str) -> bool {
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_pods_resolv_conf() {
        let dns = parse(
            "# generated\nsearch default.svc.cluster.local svc.cluster.local Cluster.Local\n\
             nameserver 10.96.0.10\nnameserver fd00::10\nnameserver bogus\nnameserver 1.1.1.1 extra\n\
             options ndots:5\n",
        );
        assert_eq!(dns.ipv4, vec![Ipv4Addr::new(10, 96, 0, 10)]);
        assert_eq!(
            dns.ipv6,
            vec![
                "fd00::10"
                    .parse::<Ipv6Addr>()
                    .unwrap_or(Ipv6Addr::LOCALHOST)
            ]
        );
        assert_eq!(
            dns.search,
            vec![
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
    }

    #[test]
    fn defaults_and_rejections() {
        let dns = parse("search bad..name ok.example -bad\n");
        assert_eq!(dns.ipv4, vec![DEFAULT_DNS]);
        assert_eq!(dns.search, vec!["ok.example"]);
        assert_eq!(dns.rejected, vec!["bad..name", "-bad"]);
        let empty = parse("");
        assert_eq!(empty.search, vec![DEFAULT_SEARCH_DOMAIN]);
    }
}
