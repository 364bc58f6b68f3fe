//! HPACK's Huffman code (RFC 7541, Appendix B), decoding only: grpc-go
//! Huffman-codes its header strings; ours go out as plain literals.
//!
//! The code is canonical: within one length, codes count up in symbol
//! order, and each length starts where the previous one ended, shifted.
//! So the table below holds only each symbol's code length, and decoding
//! needs, per length, the first code and where its symbols start in the
//! symbol list sorted by (length, symbol). Both are computed at compile
//! time from the lengths.

/// The bit length of each symbol's code: bytes 0..=255, then EOS (256).
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

const MAX_LEN: usize = 30;

/// The canonical decoding tables, indexed by code length.
struct Canonical {
    /// The first (smallest) code of each length.
    first_code: [u32; MAX_LEN + 1],
    /// How many symbols have a code of each length.
    count: [u16; MAX_LEN + 1],
    /// Where each length's symbols start in `symbols`.
    offset: [u16; MAX_LEN + 1],
    /// Every symbol, sorted by (code length, symbol).
    symbols: [u16; 257],
}

// Symbols are below 257 and lengths at most 30, so the casts keep their
// values (a const fn cannot call `try_from`).
#[allow(clippy::cast_possible_truncation)]
const fn canonical() -> Canonical {
    let mut count = [0u16; MAX_LEN + 1];
    let mut s = 0;
    while s < LENGTHS.len() {
        count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let mut first_code = [0u32; MAX_LEN + 1];
    let mut offset = [0u16; MAX_LEN + 1];
    let mut code = 0u32;
    let mut next = 0u16;
    let mut len = 1;
    while len <= MAX_LEN {
        first_code[len] = code;
        offset[len] = next;
        code = (code + count[len] as u32) << 1;
        next += count[len];
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut filled = [0u16; MAX_LEN + 1];
    let mut s = 0;
    while s < LENGTHS.len() {
        let len = LENGTHS[s] as usize;
        symbols[(offset[len] + filled[len]) as usize] = s as u16;
        filled[len] += 1;
        s += 1;
    }
    Canonical {
        first_code,
        count,
        offset,
        symbols,
    }
}

static TABLE: Canonical = canonical();

/// Why a Huffman string is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HuffmanError {
    /// The string decodes to more than the caller allows.
    TooLong,
    /// The EOS symbol inside the string, or padding that is longer than
    /// 7 bits or not the start of EOS (all ones).
    Invalid,
}

/// Decodes `input`, appending to `out`; refuses to make `out` longer than
/// `limit` bytes.
pub fn decode(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), HuffmanError> {
    let mut code = 0u32;
    let mut len = 0usize;
    for byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let index = code.wrapping_sub(TABLE.first_code[len]);
            if code >= TABLE.first_code[len] && index < u32::from(TABLE.count[len]) {
                let at = usize::from(TABLE.offset[len]) + index as usize;
                let symbol = TABLE.symbols[at];
                let Ok(byte) = u8::try_from(symbol) else {
                    // EOS (256) is the only symbol that is not a byte.
                    return Err(HuffmanError::Invalid);
                };
                if out.len() >= limit {
                    return Err(HuffmanError::TooLong);
                }
                out.push(byte);
                code = 0;
                len = 0;
            } else if len >= MAX_LEN {
                // Unreachable with a complete code; kept as a guard.
                return Err(HuffmanError::Invalid);
            }
        }
    }
    // What is left must be padding: at most 7 bits, all ones.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Invalid);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const EOS: u16 = 256;

    pub(crate) fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    fn decoded(text: &str) -> Result<String, HuffmanError> {
        let mut out = Vec::new();
        decode(&hex(text), &mut out, 1 << 16)?;
        Ok(String::from_utf8(out).unwrap())
    }

    /// A symbol's code, rebuilt from the canonical tables.
    fn code_of(symbol: u16) -> (u32, usize) {
        let len = usize::from(LENGTHS[usize::from(symbol)]);
        let start = usize::from(TABLE.offset[len]);
        let rank = TABLE.symbols[start..]
            .iter()
            .position(|&s| s == symbol)
            .unwrap();
        (TABLE.first_code[len] + u32::try_from(rank).unwrap(), len)
    }

    #[test]
    fn the_lengths_make_a_complete_prefix_code() {
        // Kraft's sum is exactly 1: no code is missing and none overlaps.
        let sum: u64 = LENGTHS
            .iter()
            .map(|&l| 1u64 << (MAX_LEN - l as usize))
            .sum();
        assert_eq!(sum, 1u64 << MAX_LEN);
    }

    #[test]
    fn codes_match_rfc_7541_appendix_b() {
        // A sample of the table's rows: (symbol, code, bits).
        let rows = [
            (0u16, 0x1ff8, 13),
            (b' '.into(), 0x14, 6),
            (b'0'.into(), 0x0, 5),
            (b'a'.into(), 0x3, 5),
            (b':'.into(), 0x5c, 7),
            (b'z'.into(), 0x7b, 7),
            (b'~'.into(), 0x1ffd, 13),
            (127, 0xffffffc, 28),
            (128, 0xfffe6, 20),
            (129, 0x3fffd2, 22),
            (255, 0x3ffffee, 26),
            (EOS, 0x3fffffff, 30),
        ];
        for (symbol, code, len) in rows {
            assert_eq!(code_of(symbol), (code, len), "symbol {symbol}");
        }
    }

    #[test]
    fn decodes_rfc_7541_appendix_c_strings() {
        let cases = [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
            ("6402", "302"),
            ("aec3 771a 4b", "private"),
            (
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
                "Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            (
                "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
                "https://www.example.com",
            ),
            ("9bd9 ab", "gzip"),
            ("", ""),
        ];
        for (encoded, plain) in cases {
            assert_eq!(decoded(encoded).as_deref(), Ok(plain), "{encoded}");
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // '0' is 00000: three bits of ones pad it to a byte.
        assert_eq!(decoded("07").as_deref(), Ok("0"));
        // Padding with a zero bit in it.
        assert_eq!(decoded("06"), Err(HuffmanError::Invalid));
        // A whole byte of padding after "0" 00000|111 11111111.
        assert_eq!(decoded("07ff"), Err(HuffmanError::Invalid));
        // EOS itself (30 ones), padded with ones.
        assert_eq!(decoded("ffff ffff"), Err(HuffmanError::Invalid));
    }

    #[test]
    fn the_output_limit_holds() {
        let mut out = Vec::new();
        let www = hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff");
        assert_eq!(decode(&www, &mut out, 5), Err(HuffmanError::TooLong));
        assert!(out.len() <= 5);
    }
}
