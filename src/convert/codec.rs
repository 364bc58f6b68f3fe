//! Small encodings the converter needs: KubeVirt's name-based (v5) firmware
//! UUID, and UUID syntax checks.

use uuid::Uuid;

/// KubeVirt derives a VM's firmware UUID from its name with this namespace
/// (pkg/virt-controller/watch/vm: `magicUUID`, `CalculateLegacyUUID`).
const FIRMWARE_UUID_NAMESPACE: Uuid = Uuid::from_bytes([
    0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58, 0x95,
]);

/// The UUID KubeVirt gives a VM without `firmware.uuid`: UUIDv5(namespace, name).
pub(crate) fn firmware_uuid_for_name(name: &str) -> String {
    Uuid::new_v5(&FIRMWARE_UUID_NAMESPACE, name.as_bytes()).to_string()
}

/// True for the canonical 8-4-4-4-12 hex form libvirt accepts.
pub(crate) fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v5_matches_rfc_example() {
        // DNS namespace, "www.example.com" (well-known v5 test vector).
        assert_eq!(
            Uuid::new_v5(&Uuid::NAMESPACE_DNS, b"www.example.com").to_string(),
            "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        );
        // Same value as Python's uuid.uuid5(UUID("6a1a24a1-…"), "demo").
        assert_eq!(
            firmware_uuid_for_name("demo"),
            "c89d1344-ee03-5c55-99bd-5df16b72bea0"
        );
    }

    #[test]
    fn uuid_syntax() {
        assert!(is_uuid("5a9f3a2e-1c4b-5d6e-8f90-123456789abc"));
        assert!(!is_uuid("5a9f3a2e1c4b5d6e8f90123456789abc"));
        assert!(!is_uuid("5a9f3a2e-1c4b-5d6e-8f90-123456789abz"));
    }
}
