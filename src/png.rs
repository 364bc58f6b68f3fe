//! PPM to PNG, for `screenshot`: QEMU's screendump is a binary PPM (P6)
//! unless libvirt and QEMU both know PNG (libvirt 9.0 with QEMU 7.2 hand
//! over PNG, which passes through), and a PPM is what no browser shows
//! inline; PNG is what KubeVirt's `virtctl vnc screenshot` writes.
//!
//! The PNG is uncompressed: its zlib stream is made of deflate's "stored"
//! blocks, which every PNG decoder reads; with the CRC-32 of each chunk
//! and the Adler-32 of the pixels that is the whole format, and it needs
//! no image or compression crate. The file is a little larger than the
//! PPM (one filter byte a row, five bytes a 64 KiB block).

/// A binary PPM's pixels: 8-bit RGB, row by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image<'a> {
    pub width: u32,
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: &'a [u8],
}

/// Reads a binary PPM (P6) with 8-bit samples (QEMU's screendump).
pub fn parse_ppm(data: &[u8]) -> Result<Image<'_>, String> {
    let mut at = 0;
    let magic = header_token(data, &mut at)?;
    if magic != b"P6" {
        return Err(format!(
            "not a binary PPM: it starts with {:?}, not P6",
            String::from_utf8_lossy(&magic[..magic.len().min(8)])
        ));
    }
    let mut number = |what: &str| -> Result<u32, String> {
        let token = header_token(data, &mut at)?;
        std::str::from_utf8(token)
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
            .ok_or_else(|| {
                format!(
                    "the PPM's {what} is {:?}, not a number",
                    String::from_utf8_lossy(token)
                )
            })
    };
    let width = number("width")?;
    let height = number("height")?;
    let maxval = number("maximum sample value")?;
    if width == 0 || height == 0 {
        return Err(format!("the PPM is {width}x{height}: no pixels"));
    }
    if maxval == 0 || maxval > 255 {
        return Err(format!(
            "the PPM's samples go up to {maxval}; only 8-bit samples (at most 255) are read"
        ));
    }
    // One whitespace byte ends the header.
    at += 1;
    let size = usize::try_from(u64::from(width) * u64::from(height) * 3)
        .map_err(|_| format!("a {width}x{height} PPM is too large"))?;
    let rgb = data
        .get(at..)
        .and_then(|rest| rest.get(..size))
        .ok_or_else(|| {
            format!(
                "the PPM says {width}x{height} pixels ({size} bytes) but has {} bytes of them",
                data.len().saturating_sub(at)
            )
        })?;
    Ok(Image { width, height, rgb })
}

/// The next whitespace-separated token of a PNM header, skipping `#`
/// comments; `at` ends on the whitespace after it.
fn header_token<'a>(data: &'a [u8], at: &mut usize) -> Result<&'a [u8], String> {
    loop {
        match data.get(*at) {
            None => return Err("the PPM ends inside its header".to_string()),
            Some(b'#') => {
                while data.get(*at).is_some_and(|&b| b != b'\n') {
                    *at += 1;
                }
            }
            Some(b) if b.is_ascii_whitespace() => *at += 1,
            Some(_) => break,
        }
    }
    let start = *at;
    while data.get(*at).is_some_and(|b| !b.is_ascii_whitespace()) {
        *at += 1;
    }
    if *at >= data.len() {
        return Err("the PPM ends inside its header".to_string());
    }
    Ok(&data[start..*at])
}

/// A PNG's width and height, from its header chunk.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.get(..8)? != b"\x89PNG\r\n\x1a\n" || png.get(12..16)? != b"IHDR" {
        return None;
    }
    let word = |at: usize| Some(u32::from_be_bytes(png.get(at..at + 4)?.try_into().ok()?));
    Some((word(16)?, word(20)?))
}

/// The image as an 8-bit RGB PNG.
pub fn encode_png(image: &Image) -> Vec<u8> {
    let row = image.rgb.len() / usize::try_from(image.height).unwrap_or(1).max(1);
    // Each row is preceded by its filter type, 0 (none).
    let mut raw = Vec::with_capacity(image.rgb.len() + image.rgb.len() / row.max(1) + 1);
    for pixels in image.rgb.chunks(row.max(1)) {
        raw.push(0);
        raw.extend_from_slice(pixels);
    }
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&image.width.to_be_bytes());
    ihdr.extend_from_slice(&image.height.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, no filter method
    // variants, not interlaced.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let idat = zlib_stored(&raw);
    let mut png = Vec::with_capacity(idat.len() + 64);
    png.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &idat);
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    // A chunk is at most 2^31 - 1 bytes; screenshots are far smaller
    // (backends refuse more than 64 MiB).
    let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
    png.extend_from_slice(&length.to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream (RFC 1950) of deflate's stored blocks (RFC 1951 §3.2.4).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 65535;
    let mut out = Vec::with_capacity(data.len() + data.len() / BLOCK * 5 + 16);
    // CMF: deflate with a 32 KiB window; FLG: no dictionary, fastest
    // level, and the check bits that make CMF*256+FLG a multiple of 31.
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = data.chunks(BLOCK).peekable();
    if blocks.peek().is_none() {
        // An empty stream is one empty final block.
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = blocks.peek().is_none();
        out.push(u8::from(last));
        // At most BLOCK bytes, so it fits.
        let len = u16::try_from(block.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

/// CRC-32 as PNG (and zlib, gzip, Ethernet) computes it.
fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (n, entry) in (0u32..).zip(table.iter_mut()) {
            let mut c = n;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *entry = c;
        }
        table
    });
    let mut c = 0xffff_ffffu32;
    for &byte in data {
        c = table[usize::from(c.to_le_bytes()[0] ^ byte)] ^ (c >> 8);
    }
    c ^ 0xffff_ffff
}

/// Adler-32, zlib's checksum of the uncompressed data.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    // 5552 bytes is the most that can be summed before a u32 overflows.
    let (mut a, mut b) = (1u32, 0u32);
    for block in data.chunks(5552) {
        for &byte in block {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_the_published_values() {
        // The CRC of an IEND chunk's type, in every PNG file.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        // RFC 1950's example value for "Wikipedia".
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        assert_eq!(adler32(&[]), 1);
        // Past one summing block, against the definition.
        let long: Vec<u8> = (0..20_000u32)
            .map(|i| u8::try_from(i * 7 % 251).unwrap())
            .collect();
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &long {
            a = (a + u64::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(u64::from(adler32(&long)), (b << 16) | a);
    }

    #[test]
    fn a_ppm_header_with_comments_is_read() {
        let ppm = b"P6\n# made by a test\n2 1\n255\n\xff\x00\x00\x00\x00\xff";
        let image = parse_ppm(ppm).unwrap();
        assert_eq!((image.width, image.height), (2, 1));
        assert_eq!(image.rgb, b"\xff\x00\x00\x00\x00\xff");
    }

    #[test]
    fn broken_ppms_are_refused_with_a_reason() {
        for (ppm, why) in [
            (&b"P3\n1 1\n255\n000"[..], "not a binary PPM"),
            (b"P6\n2 2\n255\n\x00\x00\x00", "has 3 bytes"),
            (b"P6\n0 1\n255\n", "no pixels"),
            (b"P6\n1 1\n65535\n\x00\x00\x00\x00\x00\x00", "8-bit"),
            (b"P6\n1 x\n255\n\x00\x00\x00", "not a number"),
            (b"P6\n1", "ends inside its header"),
            (b"", "ends inside its header"),
        ] {
            let err = parse_ppm(ppm).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    /// Reads the stored blocks back, as an inflater does.
    fn inflate_stored(z: &[u8]) -> Vec<u8> {
        assert_eq!((u16::from(z[0]) << 8 | u16::from(z[1])) % 31, 0);
        let mut at = 2;
        let mut out = Vec::new();
        loop {
            let header = z[at];
            assert_eq!(header >> 1, 0, "stored block");
            let len = usize::from(u16::from_le_bytes([z[at + 1], z[at + 2]]));
            let nlen = u16::from_le_bytes([z[at + 3], z[at + 4]]);
            assert_eq!(usize::from(!nlen), len);
            out.extend_from_slice(&z[at + 5..at + 5 + len]);
            at += 5 + len;
            if header & 1 == 1 {
                break;
            }
        }
        assert_eq!(
            u32::from_be_bytes(z[at..at + 4].try_into().unwrap()),
            adler32(&out)
        );
        assert_eq!(at + 4, z.len());
        out
    }

    #[test]
    fn the_png_has_its_chunks_and_the_pixels_row_by_row() {
        // Wide enough for the zlib stream to need two stored blocks.
        let (width, height) = (200u32, 120u32);
        let rgb: Vec<u8> = (0..width * height * 3)
            .map(|i| u8::try_from(i % 256).unwrap())
            .collect();
        let png = encode_png(&Image {
            width,
            height,
            rgb: &rgb,
        });
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(png_size(&png), Some((200, 120)));
        assert_eq!(png_size(&png[..20]), None);
        assert_eq!(png_size(b"P6\n"), None);
        let mut at = 8;
        let mut chunks = Vec::new();
        while at < png.len() {
            let len =
                usize::try_from(u32::from_be_bytes(png[at..at + 4].try_into().unwrap())).unwrap();
            let kind = png[at + 4..at + 8].to_vec();
            let data = png[at + 8..at + 8 + len].to_vec();
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc, crc32(&png[at + 4..at + 8 + len]));
            chunks.push((kind, data));
            at += 12 + len;
        }
        let kinds: Vec<&[u8]> = chunks.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(kinds, [&b"IHDR"[..], b"IDAT", b"IEND"]);
        assert_eq!(
            chunks[0].1,
            [0, 0, 0, 200, 0, 0, 0, 120, 8, 2, 0, 0, 0].to_vec()
        );
        let raw = inflate_stored(&chunks[1].1);
        let row = usize::try_from(width * 3).unwrap();
        assert_eq!(raw.len(), (row + 1) * usize::try_from(height).unwrap());
        for (y, line) in raw.chunks(row + 1).enumerate() {
            assert_eq!(line[0], 0);
            assert_eq!(&line[1..], &rgb[y * row..(y + 1) * row]);
        }
    }
}
