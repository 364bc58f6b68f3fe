//! base64 as Go's `encoding/base64.StdEncoding` reads it, the one decoder
//! of the launcher: for a VMI's `userDataBase64` (KubeVirt decodes it with
//! Go) and for the guest agent's `guest-exec` output; and the encoder for
//! binary data in replies (`screenshot`).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648) with padding, as Go's `StdEncoding` writes
/// it (and protobuf's JSON mapping writes `bytes`).
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let sextet =
            |shift: u32| char::from(ALPHABET[usize::try_from((n >> shift) & 63).unwrap_or(0)]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if group.len() > 1 { sextet(6) } else { '=' });
        out.push(if group.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// Standard base64 (RFC 4648) as Go's `StdEncoding` reads it; line breaks
/// are ignored and padding is optional.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
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
            // `buffer` holds `bits` more bits than this byte.
            out.push((buffer >> bits).to_le_bytes()[0]);
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

    #[test]
    fn encodes_as_rfc_4648_and_round_trips() {
        // RFC 4648 §10's test vectors.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
        }
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
    }

    #[test]
    fn decodes_with_and_without_padding() {
        assert_eq!(
            base64_decode("I2Nsb3VkLWNvbmZpZw==").ok(),
            Some(b"#cloud-config".to_vec())
        );
        assert_eq!(
            base64_decode("I2Nsb3VkLWNvbmZpZw").ok(),
            Some(b"#cloud-config".to_vec())
        );
        assert_eq!(base64_decode("aGVsbG8K").unwrap(), b"hello\n");
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aA==").unwrap(), b"h");
        assert_eq!(base64_decode("").unwrap(), b"");
    }

    #[test]
    fn line_breaks_are_ignored_as_go_does() {
        assert_eq!(base64_decode("aGVs\nbG8=").ok(), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVs\r\nbG8=").ok(), Some(b"hello".to_vec()));
        // Other whitespace is not base64.
        assert!(base64_decode("aGVs bG8=").is_err());
    }

    #[test]
    fn bad_input_is_an_error_naming_where() {
        assert!(base64_decode("aGk=\naGk=").is_err());
        assert!(base64_decode("a=b=").is_err());
        let err = base64_decode("not base64!").unwrap_err();
        assert!(err.contains("offset 3"), "{err}");
        assert!(base64_decode("****").is_err());
        assert!(base64_decode("a").is_err());
    }
}
