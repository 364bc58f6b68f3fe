//! The masquerade interface's nftables rules (KubeVirt:
//! pkg/network/setup/netpod/masquerade), applied with the `nft` program in
//! one transaction (`nft -f -`).
//!
//! KubeVirt adds its chains to a table named `nat`; the launcher uses its
//! own table per family, [`TABLE`], so that it never touches another
//! program's rules (iptables-nft also uses `ip nat`) and can remove
//! everything it added by deleting its tables.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};

use super::error::NftError;

pub const TABLE: &str = "virt_launcher_nat";
/// Where the `nft` program is looked for.
const NFT_PATHS: [&str; 3] = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// A forwarded port or range (`start == end` for a single port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub protocol: Protocol,
    pub start: u16,
    pub end: u16,
}

impl Forward {
    fn ports(&self) -> String {
        if self.start == self.end {
            self.start.to_string()
        } else {
            format!("{}-{}", self.start, self.end)
        }
    }
}

/// One family's rules for one masquerade interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqueradeRules {
    pub pod_interface: String,
    pub bridge: String,
    pub guest: IpAddr,
    pub gateway: IpAddr,
    /// Empty: every port goes to the guest, as KubeVirt does.
    pub forwards: Vec<Forward>,
}

fn family(ip: &IpAddr) -> (&'static str, &'static str, &'static str) {
    match ip {
        IpAddr::V4(_) => ("ip", "ip", "127.0.0.1"),
        IpAddr::V6(_) => ("ip6", "ip6", "::1"),
    }
}

/// The `nft -f` script that creates the table of `rules`' family.
pub fn script(rules: &MasqueradeRules) -> String {
    let (fam, match_kw, loopback) = family(&rules.guest);
    let guest = rules.guest;
    let gw = rules.gateway;
    let pod = &rules.pod_interface;
    let bridge = &rules.bridge;
    let mut s = String::new();
    let _ = writeln!(s, "table {fam} {TABLE} {{");
    let _ = writeln!(s, "  chain prerouting {{");
    let _ = writeln!(s, "    type nat hook prerouting priority -100;");
    let _ = writeln!(s, "    iifname \"{pod}\" counter jump KUBEVIRT_PREINBOUND");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain input {{");
    let _ = writeln!(s, "    type nat hook input priority 100;");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain output {{");
    let _ = writeln!(s, "    type nat hook output priority -100;");
    if rules.forwards.is_empty() {
        let _ = writeln!(
            s,
            "    {match_kw} daddr {{ {loopback} }} counter dnat to {guest}"
        );
    }
    for f in &rules.forwards {
        let _ = writeln!(
            s,
            "    {match_kw} daddr {{ {loopback} }} {} dport {} counter dnat to {guest}",
            f.protocol.as_str(),
            f.ports()
        );
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain postrouting {{");
    let _ = writeln!(s, "    type nat hook postrouting priority 100;");
    let _ = writeln!(s, "    {match_kw} saddr {guest} counter masquerade");
    let _ = writeln!(
        s,
        "    oifname \"{bridge}\" counter jump KUBEVIRT_POSTINBOUND"
    );
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain KUBEVIRT_PREINBOUND {{");
    if rules.forwards.is_empty() {
        let _ = writeln!(s, "    counter dnat to {guest}");
    }
    for f in &rules.forwards {
        let _ = writeln!(
            s,
            "    {} dport {} counter dnat to {guest}",
            f.protocol.as_str(),
            f.ports()
        );
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain KUBEVIRT_POSTINBOUND {{");
    if rules.forwards.is_empty() {
        let _ = writeln!(
            s,
            "    {match_kw} saddr {{ {loopback} }} counter snat to {gw}"
        );
    }
    for f in &rules.forwards {
        let _ = writeln!(
            s,
            "    {} dport {} {match_kw} saddr {{ {loopback} }} counter snat to {gw}",
            f.protocol.as_str(),
            f.ports()
        );
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "}}");
    s
}

fn nft_binary() -> Result<&'static str, NftError> {
    NFT_PATHS
        .iter()
        .copied()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or(NftError::NotInstalled)
}

/// Runs `nft -f -` with `script` on its standard input.
pub fn apply(script: &str) -> Result<(), NftError> {
    let program = nft_binary()?;
    let mut child = Command::new(program)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NftError::Spawn { program, source })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|source| NftError::Write { program, source })?;
    }
    let output = child
        .wait_with_output()
        .map_err(|source| NftError::Wait { program, source })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NftError::Refused {
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// Deletes the launcher's table of `family` ("ip" or "ip6").
pub fn delete_table(family: &str) -> Result<(), NftError> {
    apply(&format!("delete table {family} {TABLE}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_listed_are_forwarded_and_nothing_else() {
        let rules = MasqueradeRules {
            pod_interface: "eth0".into(),
            bridge: "k6t-eth0".into(),
            guest: "10.0.2.2".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            gateway: "10.0.2.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            forwards: vec![
                Forward {
                    protocol: Protocol::Tcp,
                    start: 80,
                    end: 80,
                },
                Forward {
                    protocol: Protocol::Udp,
                    start: 5000,
                    end: 5010,
                },
            ],
        };
        let s = script(&rules);
        assert!(s.starts_with("table ip virt_launcher_nat {"), "{s}");
        assert!(s.contains("iifname \"eth0\" counter jump KUBEVIRT_PREINBOUND"));
        assert!(s.contains("ip saddr 10.0.2.2 counter masquerade"));
        assert!(s.contains("    tcp dport 80 counter dnat to 10.0.2.2\n"));
        assert!(s.contains("    udp dport 5000-5010 counter dnat to 10.0.2.2\n"));
        assert!(s.contains("tcp dport 80 ip saddr { 127.0.0.1 } counter snat to 10.0.2.1"));
        assert!(!s.contains("    counter dnat to 10.0.2.2\n"));
    }

    #[test]
    fn no_ports_forwards_everything_and_ipv6_uses_ip6() {
        let rules = MasqueradeRules {
            pod_interface: "eth0".into(),
            bridge: "k6t-eth0".into(),
            guest: "fd10:0:2::2".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            gateway: "fd10:0:2::1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            forwards: Vec::new(),
        };
        let s = script(&rules);
        assert!(s.starts_with("table ip6 virt_launcher_nat {"), "{s}");
        assert!(s.contains("    counter dnat to fd10:0:2::2\n"));
        assert!(s.contains("ip6 saddr fd10:0:2::2 counter masquerade"));
        assert!(s.contains("ip6 saddr { ::1 } counter snat to fd10:0:2::1"));
    }
}
