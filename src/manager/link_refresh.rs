//! KubeVirt's `LinkRefresh` interface migration: once a guest has arrived,
//! the links of the named interfaces go down and up, so that the guest asks
//! the new node for a DHCP lease (KubeVirt's `reconnectGuestNics`). Runs on
//! a job worker: it waits between the two changes.

use std::time::Duration;

use super::errors::hypervisor_error;
use crate::domxml::{Alias, Domain, LinkState};
use crate::hypervisor::{Affect, Hypervisor};
use crate::protocol::CommandError;

/// How long a link stays down: some guests ignore a down and up that come
/// at once (KubeVirt waits as long).
const LINK_DOWN_FOR: Duration = Duration::from_millis(100);

/// Takes the links of `interfaces` (by VMI name) down and up again on the
/// running domain; returns their names in that order.
pub(super) fn refresh(
    hv: &dyn Hypervisor,
    domain: &str,
    interfaces: &[String],
) -> Result<Vec<String>, CommandError> {
    let (xml, _) = hv.domain_xml(domain).map_err(|e| hypervisor_error(&e))?;
    let live = Domain::from_xml(&xml).map_err(|e| CommandError::internal(e.to_string()))?;
    let mut refreshed = Vec::new();
    for name in interfaces {
        let alias = Alias::user(name).name;
        let nic = live
            .devices
            .interfaces
            .iter()
            .find(|nic| nic.alias.as_ref().is_some_and(|a| a.name == alias))
            .ok_or_else(|| {
                CommandError::invalid_argument(format!(
                    "refresh_links: the domain has no interface {name:?} (alias {alias})"
                ))
            })?;
        let mut down = nic.clone();
        down.link = Some(LinkState {
            state: "down".to_string(),
        });
        let as_xml = |nic| {
            Domain::device_xml("interface", nic).map_err(|e| CommandError::internal(e.to_string()))
        };
        let (down, up) = (as_xml(&down)?, as_xml(nic)?);
        let failed = |what: &str, e: &crate::hypervisor::HypervisorError| {
            let mut error = hypervisor_error(e);
            error.desc = format!(
                "refresh_links: setting the link of {name:?} {what}: {}",
                error.desc
            );
            error
        };
        hv.update_device(domain, &down, Affect::LIVE)
            .map_err(|e| failed("down", &e))?;
        std::thread::sleep(LINK_DOWN_FOR);
        hv.update_device(domain, &up, Affect::LIVE)
            .map_err(|e| failed("up again", &e))?;
        log::info!("manager: the link of interface {name:?} went down and up (LinkRefresh)");
        refreshed.push(name.clone());
    }
    Ok(refreshed)
}
