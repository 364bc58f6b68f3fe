//! Pod networking as KubeVirt does it (pkg/network): the guest's NICs are
//! taps in the pod's network namespace, joined to a bridge, and the
//! launcher's own DHCP server (and, for IPv6 masquerade, DHCPv6 server and
//! router advertiser) tells the guest its address.
//!
//! | module | owns |
//! |---|---|
//! | `dhcp` | DHCPv4 wire format (RFC 2131/2132) and the one-client answerer |
//! | `dhcpv6`, `ra` | DHCPv6 (RFC 8415) answers and router advertisements |
//! | `resolv` | the pod's DNS servers and search domains |
//! | `names` | KubeVirt's names for pod interfaces, bridges and taps |
//! | `server` | the threads that answer the guest |

pub mod dhcp;
pub mod dhcpv6;
pub mod names;
pub mod ra;
pub mod resolv;
pub mod server;
