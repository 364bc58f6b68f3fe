//! PCI addresses given in a VMI (`pciAddress` of disks and interfaces).

use super::ConvertError;
use crate::domxml::Address;

/// "0000:81:01.0" → `<address type='pci' domain='0x0000' bus='0x81' slot='0x01' function='0x0'/>`
/// (KubeVirt pkg/virt-launcher/virtwrap/device `NewPciAddressField`).
pub(crate) fn parse_pci_address(text: &str, path: &str) -> Result<Address, ConvertError> {
    let invalid = || {
        ConvertError::new(
            path,
            format!("{text:?} is not a PCI address such as 0000:81:01.0"),
        )
    };
    let (domain_bus_slot, function) = text.split_once('.').ok_or_else(invalid)?;
    let parts: Vec<&str> = domain_bus_slot.split(':').collect();
    let hex =
        |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = parts.len() == 3
        && hex(parts[0], 4)
        && hex(parts[1], 2)
        && hex(parts[2], 2)
        && function.len() == 1
        && function.bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !valid {
        return Err(invalid());
    }
    Ok(Address {
        address_type: "pci".to_string(),
        domain: Some(format!("0x{}", parts[0].to_ascii_lowercase())),
        bus: Some(format!("0x{}", parts[1].to_ascii_lowercase())),
        slot: Some(format!("0x{}", parts[2].to_ascii_lowercase())),
        function: Some(format!("0x{function}")),
        ..Address::default()
    })
}

#[cfg(test)]
mod tests {
    use super::parse_pci_address;

    #[test]
    fn parses_domain_bus_slot_function() {
        let address =
            parse_pci_address("0000:81:0A.7", "x.pciAddress").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                address.address_type.as_str(),
                address.domain.as_deref(),
                address.bus.as_deref(),
                address.slot.as_deref(),
                address.function.as_deref()
            ),
            (
                "pci",
                Some("0x0000"),
                Some("0x81"),
                Some("0x0a"),
                Some("0x7")
            )
        );
        for bad in ["81:01.0", "0000:81:01", "0000:81:01.8", "000g:81:01.0", ""] {
            let err = parse_pci_address(bad, "x.pciAddress")
                .err()
                .map(|e| e.to_string());
            assert_eq!(
                err,
                Some(format!(
                    "x.pciAddress: {bad:?} is not a PCI address such as 0000:81:01.0"
                )),
            );
        }
    }
}
