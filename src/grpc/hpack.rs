//! HPACK (RFC 7541): the header compression of HTTP/2.
//!
//! The decoder takes every representation a peer may send (indexed,
//! literals with and without indexing, never indexed, Huffman-coded
//! strings, dynamic table size updates) and keeps the dynamic table in
//! step with the peer's encoder. Any fault in a header block is an
//! [`HpackError`], which HTTP/2 makes a connection error: after a bad
//! block the two tables can no longer be trusted to agree.
//!
//! The encoder never touches a dynamic table: it writes static-table
//! references and literals without indexing, so the peer's decoder state
//! never depends on ours and there is nothing to keep in step.

use std::collections::VecDeque;

use super::huffman;

/// RFC 7541 Appendix A: the static table, indexes 1 to 61.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// What a table entry costs (RFC 7541 section 4.1): its octets plus 32.
const ENTRY_OVERHEAD: usize = 32;

/// HTTP/2's default SETTINGS_HEADER_TABLE_SIZE: the dynamic table the
/// decoder allows, as long as we advertise no other value.
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// A decoded header field. Names and values that are not UTF-8 (HTTP/2
/// allows any octets in values) are kept lossily; gRPC's own are ASCII.
pub type Header = (String, String);

/// Why a header block is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer past what any valid block needs.
    IntegerOverflow,
    /// An index into neither table.
    BadIndex(u64),
    /// A Huffman string with bad padding or the EOS symbol in it.
    BadHuffman,
    /// A table size update above the limit, or after the first field.
    BadTableSizeUpdate(u64),
    /// The decoded list is larger than the limit we advertised.
    ListTooLarge { limit: usize },
}

impl std::fmt::Display for HpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HpackError::Truncated => write!(f, "header block truncated"),
            HpackError::IntegerOverflow => write!(f, "integer overflow in header block"),
            HpackError::BadIndex(i) => write!(f, "header index {i} is in neither table"),
            HpackError::BadHuffman => write!(f, "bad Huffman string in header block"),
            HpackError::BadTableSizeUpdate(size) => {
                write!(f, "dynamic table size update to {size} not allowed")
            }
            HpackError::ListTooLarge { limit } => {
                write!(f, "header list larger than {limit} bytes")
            }
        }
    }
}

/// A dynamic table entry, or a field looked up in either table. Sizes
/// count the octets on the wire, not the (possibly lossy) strings.
struct Entry {
    name: String,
    name_len: usize,
    value: String,
    size: usize,
}

/// One direction's decoder: its dynamic table lives as long as the
/// connection.
pub struct Decoder {
    /// Newest first: dynamic index 62 is `table[0]`.
    table: VecDeque<Entry>,
    size: usize,
    /// The table size the peer's encoder chose (a size update).
    max_size: usize,
    /// The most the peer may choose: our SETTINGS_HEADER_TABLE_SIZE.
    limit: usize,
    max_list: usize,
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `table_limit` octets
    /// and which refuses header lists over `max_list` octets (counted as
    /// SETTINGS_MAX_HEADER_LIST_SIZE counts them).
    pub fn new(table_limit: usize, max_list: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: table_limit,
            limit: table_limit,
            max_list,
        }
    }

    /// Decodes one complete header block (HEADERS plus its CONTINUATIONs).
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<Header>, HpackError> {
        let mut input = Input {
            bytes: block,
            at: 0,
        };
        let mut headers = Vec::new();
        let mut list_size = 0usize;
        while let Some(&first) = input.peek() {
            let (name, value, raw_size) = if first & 0x80 != 0 {
                let field = self.lookup(input.integer(7)?)?;
                (field.name, field.value, field.size)
            } else if first & 0xe0 == 0x20 {
                // A size update: only before the first field (RFC 7541
                // section 4.2).
                let size = input.integer(5)?;
                if !headers.is_empty() || size > self.limit as u64 {
                    return Err(HpackError::BadTableSizeUpdate(size));
                }
                self.max_size = usize::try_from(size).unwrap_or(usize::MAX);
                self.evict(0);
                continue;
            } else {
                let indexing = first & 0xc0 == 0x40;
                let prefix = if indexing { 6 } else { 4 };
                let index = input.integer(prefix)?;
                let budget = self.max_list.saturating_sub(list_size);
                let (name, name_len) = if index == 0 {
                    input.string(budget).map_err(|e| self.list_limit(e))?
                } else {
                    let field = self.lookup(index)?;
                    (field.name, field.name_len)
                };
                let (value, value_len) = input
                    .string(budget.saturating_sub(name_len))
                    .map_err(|e| self.list_limit(e))?;
                let raw_size = name_len + value_len + ENTRY_OVERHEAD;
                if indexing {
                    self.insert(&name, name_len, &value, raw_size);
                }
                (name, value, raw_size)
            };
            list_size = list_size.saturating_add(raw_size);
            if list_size > self.max_list {
                return Err(HpackError::ListTooLarge {
                    limit: self.max_list,
                });
            }
            headers.push((name, value));
        }
        Ok(headers)
    }

    /// A field by its index (1-based; the dynamic table follows the
    /// static one).
    fn lookup(&self, index: u64) -> Result<Entry, HpackError> {
        let position = usize::try_from(index).map_err(|_| HpackError::BadIndex(index))?;
        if position == 0 {
            return Err(HpackError::BadIndex(index));
        }
        if let Some((name, value)) = STATIC.get(position - 1) {
            return Ok(Entry {
                name: (*name).to_string(),
                name_len: name.len(),
                value: (*value).to_string(),
                size: name.len() + value.len() + ENTRY_OVERHEAD,
            });
        }
        match self.table.get(position - STATIC.len() - 1) {
            Some(e) => Ok(Entry {
                name: e.name.clone(),
                name_len: e.name_len,
                value: e.value.clone(),
                size: e.size,
            }),
            None => Err(HpackError::BadIndex(index)),
        }
    }

    /// A string cut short by the list limit is reported with the limit
    /// itself, not what was left of it.
    fn list_limit(&self, e: HpackError) -> HpackError {
        match e {
            HpackError::ListTooLarge { .. } => HpackError::ListTooLarge {
                limit: self.max_list,
            },
            other => other,
        }
    }

    fn insert(&mut self, name: &str, name_len: usize, value: &str, size: usize) {
        if size > self.max_size {
            // An entry larger than the table empties it and is not kept
            // (RFC 7541 section 4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.table.push_front(Entry {
            name: name.to_string(),
            name_len,
            value: value.to_string(),
            size,
        });
        self.size += size;
    }

    /// Drops the oldest entries until `room` more octets fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size,
                None => break,
            }
        }
    }
}

/// A header block being read.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn peek(&self) -> Option<&u8> {
        self.bytes.get(self.at)
    }

    fn byte(&mut self) -> Result<u8, HpackError> {
        let b = *self.bytes.get(self.at).ok_or(HpackError::Truncated)?;
        self.at += 1;
        Ok(b)
    }

    /// An integer with an N-bit prefix (RFC 7541 section 5.1). Values past
    /// 2^32 are refused: no valid index, length or size comes near.
    fn integer(&mut self, prefix_bits: u32) -> Result<u64, HpackError> {
        let mask = u8::MAX >> (8 - prefix_bits);
        let mut value = u64::from(self.byte()? & mask);
        if value < u64::from(mask) {
            return Ok(value);
        }
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            value += u64::from(b & 0x7f) << shift;
            if value > u64::from(u32::MAX) {
                return Err(HpackError::IntegerOverflow);
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 28 {
                return Err(HpackError::IntegerOverflow);
            }
        }
    }

    /// A string literal (RFC 7541 section 5.2), at most `limit` octets once
    /// decoded; returns it with its decoded length in octets.
    fn string(&mut self, limit: usize) -> Result<(String, usize), HpackError> {
        let huffman = self.peek().is_some_and(|b| b & 0x80 != 0);
        let len = self.integer(7)?;
        let len = usize::try_from(len).map_err(|_| HpackError::Truncated)?;
        let end = self.at.checked_add(len).ok_or(HpackError::Truncated)?;
        let raw = self.bytes.get(self.at..end).ok_or(HpackError::Truncated)?;
        self.at = end;
        let too_large = HpackError::ListTooLarge { limit };
        let bytes = if huffman {
            let mut out = Vec::with_capacity(len.min(limit));
            huffman::decode(raw, &mut out, limit).map_err(|e| match e {
                huffman::HuffmanError::TooLong => too_large,
                huffman::HuffmanError::Invalid => HpackError::BadHuffman,
            })?;
            out
        } else if len > limit {
            return Err(too_large);
        } else {
            raw.to_vec()
        };
        let octets = bytes.len();
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Ok((text, octets))
    }
}

/// Writes header blocks without a dynamic table.
#[derive(Default)]
pub struct Encoder {
    /// A table size the peer lowered below the default, to be signalled
    /// at the start of the next block.
    pending_size_update: Option<usize>,
}

impl Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE. This encoder inserts nothing,
    /// so its table is always empty; a size below the default is still
    /// acknowledged with a size update, as RFC 7541 section 4.2 asks.
    pub fn set_peer_table_size(&mut self, size: usize) {
        if size < DEFAULT_TABLE_SIZE {
            self.pending_size_update = Some(size);
        }
    }

    /// Appends the block for `headers` to `out`.
    pub fn encode(&mut self, headers: &[(&str, &str)], out: &mut Vec<u8>) {
        if let Some(size) = self.pending_size_update.take() {
            put_integer(out, 0x20, 5, size);
        }
        for (name, value) in headers {
            let exact = STATIC.iter().position(|(n, v)| n == name && v == value);
            if let Some(i) = exact {
                put_integer(out, 0x80, 7, i + 1);
                continue;
            }
            match STATIC.iter().position(|(n, _)| n == name) {
                // Literal without indexing, name from the static table.
                Some(i) => put_integer(out, 0x00, 4, i + 1),
                None => {
                    out.push(0x00);
                    put_string(out, name);
                }
            }
            put_string(out, value);
        }
    }
}

/// An integer with an N-bit prefix, the prefix's other bits set to `high`.
fn put_integer(out: &mut Vec<u8>, high: u8, prefix_bits: u32, value: usize) {
    let mask = (1usize << prefix_bits) - 1;
    if value < mask {
        // Below the mask, so it fits in the prefix's bits.
        out.push(high | low_byte(value));
        return;
    }
    out.push(high | low_byte(mask));
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push(0x80 | low_byte(rest & 0x7f));
        rest >>= 7;
    }
    out.push(low_byte(rest));
}

/// The low eight bits of `value`, which callers have already masked.
fn low_byte(value: usize) -> u8 {
    u8::try_from(value & 0xff).unwrap_or(0)
}

fn put_string(out: &mut Vec<u8>, text: &str) {
    put_integer(out, 0x00, 7, text.len());
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::huffman::tests::hex;

    fn pairs(list: &[(&str, &str)]) -> Vec<Header> {
        list.iter()
            .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
            .collect()
    }

    /// The dynamic table, newest first, with each entry's size.
    fn table(d: &Decoder) -> Vec<(String, String, usize)> {
        d.table
            .iter()
            .map(|e| (e.name.clone(), e.value.clone(), e.size))
            .collect()
    }

    #[test]
    fn integers_as_in_rfc_7541_c_1() {
        let read = |bytes: &[u8], prefix| Input { bytes, at: 0 }.integer(prefix);
        assert_eq!(read(&[0x0a], 5), Ok(10));
        assert_eq!(read(&[0x1f, 0x9a, 0x0a], 5), Ok(1337));
        assert_eq!(read(&[0x2a], 8), Ok(42));
        let mut out = Vec::new();
        put_integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    }

    #[test]
    fn bad_integers_are_refused() {
        let read = |bytes: &[u8]| Input { bytes, at: 0 }.integer(5);
        assert_eq!(read(&[0x1f]), Err(HpackError::Truncated));
        assert_eq!(read(&[0x1f, 0x80]), Err(HpackError::Truncated));
        // Continuation bytes without end.
        assert_eq!(
            read(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(HpackError::IntegerOverflow)
        );
        // Zero continuation bytes forever must not loop or overflow.
        assert_eq!(
            read(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(HpackError::IntegerOverflow)
        );
    }

    #[test]
    fn representations_as_in_rfc_7541_c_2() {
        let mut d = Decoder::new(4096, 1 << 16);
        assert_eq!(
            d.decode(&hex(
                "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"
            )),
            Ok(pairs(&[("custom-key", "custom-header")]))
        );
        assert_eq!(d.size, 55);
        let mut d = Decoder::new(4096, 1 << 16);
        assert_eq!(
            d.decode(&hex("040c 2f73 616d 706c 652f 7061 7468")),
            Ok(pairs(&[(":path", "/sample/path")]))
        );
        assert_eq!(
            d.decode(&hex("1008 7061 7373 776f 7264 0673 6563 7265 74")),
            Ok(pairs(&[("password", "secret")]))
        );
        assert_eq!(d.decode(&hex("82")), Ok(pairs(&[(":method", "GET")])));
        assert!(d.table.is_empty());
    }

    /// RFC 7541 C.3 (plain) and C.4 (Huffman): three requests on one
    /// connection, the dynamic table carried from one to the next.
    #[test]
    fn requests_as_in_rfc_7541_c_3_and_c_4() {
        let blocks = [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ];
        for [first, second, third] in blocks {
            let mut d = Decoder::new(4096, 1 << 16);
            let authority = (":authority", "www.example.com");
            let get = [(":method", "GET"), (":scheme", "http"), (":path", "/")];
            let mut want = get.to_vec();
            want.push(authority);
            assert_eq!(d.decode(&hex(first)), Ok(pairs(&want)));
            assert_eq!(d.size, 57);
            want.push(("cache-control", "no-cache"));
            assert_eq!(d.decode(&hex(second)), Ok(pairs(&want)));
            assert_eq!(d.size, 110);
            assert_eq!(
                d.decode(&hex(third)),
                Ok(pairs(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    authority,
                    ("custom-key", "custom-value"),
                ]))
            );
            assert_eq!(d.size, 164);
            assert_eq!(
                table(&d)
                    .iter()
                    .map(|(n, _, s)| (n.as_str(), *s))
                    .collect::<Vec<_>>(),
                [
                    ("custom-key", 54),
                    ("cache-control", 53),
                    (":authority", 57)
                ]
            );
        }
    }

    /// RFC 7541 C.5 (plain) and C.6 (Huffman): responses with a 256-octet
    /// table, so entries are evicted.
    #[test]
    fn responses_with_eviction_as_in_rfc_7541_c_5_and_c_6() {
        let blocks = [
            [
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
                 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
                 6c65 2e63 6f6d",
                "4803 3330 37c1 c0bf",
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
                 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
                 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
                 3d31",
            ],
            [
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ],
        ];
        let date1 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
        let location = ("location", "https://www.example.com");
        let private = ("cache-control", "private");
        let cookie = (
            "set-cookie",
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        );
        for [first, second, third] in blocks {
            let mut d = Decoder::new(256, 1 << 16);
            assert_eq!(
                d.decode(&hex(first)),
                Ok(pairs(&[(":status", "302"), private, date1, location]))
            );
            assert_eq!(d.size, 222);
            assert_eq!(
                d.decode(&hex(second)),
                Ok(pairs(&[(":status", "307"), private, date1, location]))
            );
            assert_eq!(d.size, 222);
            assert_eq!(table(&d)[0].0, ":status");
            assert_eq!(table(&d)[0].1, "307");
            assert_eq!(
                d.decode(&hex(third)),
                Ok(pairs(&[
                    (":status", "200"),
                    private,
                    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                    location,
                    ("content-encoding", "gzip"),
                    cookie,
                ]))
            );
            assert_eq!(d.size, 215);
            assert_eq!(
                table(&d)
                    .iter()
                    .map(|(n, _, s)| (n.as_str(), *s))
                    .collect::<Vec<_>>(),
                [("set-cookie", 98), ("content-encoding", 52), ("date", 65)]
            );
        }
    }

    #[test]
    fn bad_blocks_are_errors() {
        let mut d = Decoder::new(4096, 1 << 16);
        // Index 0, and one past the static table with an empty dynamic one.
        assert_eq!(d.decode(&[0x80]), Err(HpackError::BadIndex(0)));
        assert_eq!(d.decode(&[0xbe]), Err(HpackError::BadIndex(62)));
        // A literal's name index past both tables.
        assert_eq!(d.decode(&[0x0f, 0x30, 0x00]), Err(HpackError::BadIndex(63)));
        // A string longer than what is left.
        assert_eq!(d.decode(&[0x00, 0x05, b'a']), Err(HpackError::Truncated));
        // A Huffman string padded with zeros.
        assert_eq!(
            d.decode(&[0x00, 0x81, 0x00, 0x00]),
            Err(HpackError::BadHuffman)
        );
        // A size update above our limit, and one after a field.
        assert_eq!(
            d.decode(&[0x3f, 0xe2, 0x1f]),
            Err(HpackError::BadTableSizeUpdate(4097))
        );
        assert_eq!(
            d.decode(&[0x82, 0x20]),
            Err(HpackError::BadTableSizeUpdate(0))
        );
    }

    #[test]
    fn a_size_update_evicts_and_bounds_the_table() {
        let mut d = Decoder::new(4096, 1 << 16);
        d.decode(&hex(
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        ))
        .unwrap();
        assert_eq!(d.decode(&hex("be")).unwrap().len(), 1);
        // Size 0 empties the table: index 62 is gone.
        assert_eq!(d.decode(&[0x20]), Ok(vec![]));
        assert_eq!(d.decode(&hex("be")), Err(HpackError::BadIndex(62)));
    }

    #[test]
    fn the_header_list_limit_holds() {
        // 40 + 32 octets per field: two fit in 150, three do not.
        let mut d = Decoder::new(4096, 150);
        let mut block = Vec::new();
        Encoder::default().encode(&[("x-a", &"v".repeat(37))], &mut block);
        let one = block.clone();
        block.extend_from_slice(&one);
        assert_eq!(d.decode(&block).map(|h| h.len()), Ok(2));
        block.extend_from_slice(&one);
        assert_eq!(
            d.decode(&block),
            Err(HpackError::ListTooLarge { limit: 150 })
        );
        // A single value past the limit is refused before it is copied.
        let mut big = Vec::new();
        Encoder::default().encode(&[("x-b", &"v".repeat(1000))], &mut big);
        assert_eq!(d.decode(&big), Err(HpackError::ListTooLarge { limit: 150 }));
    }

    #[test]
    fn the_encoder_round_trips_through_the_decoder() {
        let headers = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "12"),
            ("grpc-message", "unknown method /a.B/C"),
        ];
        let mut block = Vec::new();
        let mut e = Encoder::default();
        e.encode(&headers, &mut block);
        // :status 200 is the static table's entry 8.
        assert_eq!(block[0], 0x88);
        let mut d = Decoder::new(4096, 1 << 16);
        assert_eq!(d.decode(&block), Ok(pairs(&headers)));
        // The peer's smaller table is announced once, first.
        e.set_peer_table_size(0);
        let mut block = Vec::new();
        e.encode(&[(":status", "200")], &mut block);
        assert_eq!(block, [0x20, 0x88]);
        let mut block = Vec::new();
        e.encode(&[(":status", "200")], &mut block);
        assert_eq!(block, [0x88]);
    }
}
