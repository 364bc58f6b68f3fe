//! Small encodings the converter needs and no dependency provides: SHA-1 for
//! name-based (v5) UUIDs, base64 for `userDataBase64`, UUID syntax checks.

/// KubeVirt derives a VM's firmware UUID from its name with this namespace
/// (pkg/virt-controller/watch/vm: `magicUUID`, `CalculateLegacyUUID`).
const FIRMWARE_UUID_NAMESPACE: [u8; 16] = [
    0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58, 0x95,
];

/// The UUID KubeVirt gives a VM without `firmware.uuid`: UUIDv5(namespace, name).
pub(crate) fn firmware_uuid_for_name(name: &str) -> String {
    uuid_v5(&FIRMWARE_UUID_NAMESPACE, name.as_bytes())
}

/// RFC 4122 name-based UUID, version 5 (SHA-1).
pub(crate) fn uuid_v5(namespace: &[u8; 16], name: &[u8]) -> String {
    let mut input = Vec::with_capacity(16 + name.len());
    input.extend_from_slice(namespace);
    input.extend_from_slice(name);
    let digest = sha1(&input);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x50;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format_uuid(&bytes)
}

fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
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

/// SHA-1 (FIPS 180-4). Used only to derive UUIDs, not for security.
pub(crate) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut state: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bit_len.to_be_bytes());
    for block in message.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = state;
        for (i, word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*word);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = temp;
        }
        for (slot, value) in state.iter_mut().zip([a, b, c, d, e]) {
            *slot = slot.wrapping_add(value);
        }
    }
    let mut digest = [0u8; 20];
    for (chunk, word) in digest.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    digest
}

/// Standard base64 (RFC 4648) as Go's `StdEncoding` reads it; line breaks
/// are ignored and padding is optional.
pub(crate) fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    let mut padding = 0;
    for (position, byte) in text.bytes().enumerate() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            b'\r' | b'\n' => continue,
            _ => {
                return Err(format!(
                    "invalid base64: unexpected {:?} at offset {position}",
                    byte as char
                ));
            }
        };
        if padding > 0 {
            return Err(format!(
                "invalid base64: data after padding at offset {position}"
            ));
        }
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    if bits >= 6 || padding > 2 {
        return Err("invalid base64: truncated input".to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha1_known_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(&sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    }

    #[test]
    fn uuid_v5_matches_rfc_example() {
        // DNS namespace, "www.example.com" (well-known v5 test vector).
        let dns = [
            0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4,
            0x30, 0xc8,
        ];
        assert_eq!(
            uuid_v5(&dns, b"www.example.com"),
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

    #[test]
    fn base64_round_values() {
        assert_eq!(
            base64_decode("I2Nsb3VkLWNvbmZpZw==").ok(),
            Some(b"#cloud-config".to_vec())
        );
        assert_eq!(
            base64_decode("I2Nsb3VkLWNvbmZpZw").ok(),
            Some(b"#cloud-config".to_vec())
        );
        assert!(base64_decode("aGk=\naGk=").is_err());
        assert_eq!(base64_decode("aGVs\nbG8=").ok(), Some(b"hello".to_vec()));
        assert!(base64_decode("not base64!").is_err());
        assert!(base64_decode("a").is_err());
    }
}
