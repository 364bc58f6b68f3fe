//! Boot order bookkeeping shared by disks and interfaces: each order may be
//! claimed by one device only.

use std::collections::BTreeMap;

use super::ConvertError;

/// Boot order → the device that claimed it.
pub(crate) type BootOrders = BTreeMap<u32, String>;

/// Records `order` for `device`, refusing a second device with the same order.
pub(crate) fn claim_boot_order(
    boot_orders: &mut BootOrders,
    order: u32,
    path: &str,
    name: &str,
    kind: &str,
) -> Result<(), ConvertError> {
    if order == 0 {
        return Err(ConvertError::new(path, "boot order must be 1 or more"));
    }
    if let Some(owner) = boot_orders.get(&order) {
        return Err(ConvertError::new(
            path,
            format!("boot order {order} is already used by {owner}"),
        ));
    }
    boot_orders.insert(order, format!("{kind} {name:?}"));
    Ok(())
}
