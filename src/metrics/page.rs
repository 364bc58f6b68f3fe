//! vhostmd's metrics page: the XML document a guest's `vm-dump-metrics`
//! reads, and the disk image that carries it (KubeVirt:
//! pkg/downwardmetrics/vhostmd, its `api` and `metrics` packages).
//!
//! The disk is a 256 KiB raw file: a 16-byte big-endian header (the
//! signature `mvbd`, a busy flag, the byte sum of the body as a 32-bit
//! integer, the body's length) and the XML body right after it. A guest
//! reads it through a read-only virtio disk while the launcher rewrites it
//! in place (QEMU holds the file open, so it cannot be renamed over), so a
//! write goes as KubeVirt's does: the header with the busy flag and the new
//! sum first, flushed, then the body, then the header without the flag. A
//! reader that sees the flag waits; one that read across a write finds the
//! sum wrong and reads again (vhostmd's libmetrics does both).

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The image's size (KubeVirt's `fileSize`).
pub const DISK_SIZE: u64 = 262_144;
/// The header: signature, busy flag, sum, length.
const HEADER_LEN: usize = 16;
/// The largest body KubeVirt writes (`maxBodyLength`, which keeps 8 bytes
/// more than the header free).
pub const MAX_BODY_LEN: usize = 262_144 - 24;
const SIGNATURE: [u8; 4] = *b"mvbd";

/// Whose figure a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Host,
    Vm,
}

impl Context {
    fn as_str(self) -> &'static str {
        match self {
            Context::Host => "host",
            Context::Vm => "vm",
        }
    }
}

/// A metric's value with its vhostmd type, written as KubeVirt's
/// `ToMetric` writes it (Go's `%v`, reals with six decimals).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int64(i64),
    UInt64(u64),
    Real64(f64),
    String(String),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Int64(_) => "int64",
            Value::UInt64(_) => "uint64",
            Value::Real64(_) => "real64",
            Value::String(_) => "string",
        }
    }

    fn text(&self) -> String {
        match self {
            Value::Int64(v) => v.to_string(),
            Value::UInt64(v) => v.to_string(),
            Value::Real64(v) => format!("{v:.6}"),
            Value::String(v) => v.clone(),
        }
    }
}

/// One `<metric>` of the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub context: Context,
    pub value: Value,
    /// `s`, `KiB`, or none.
    pub unit: Option<&'static str>,
}

impl Metric {
    pub fn host(name: &'static str, value: Value, unit: Option<&'static str>) -> Metric {
        Metric {
            name,
            context: Context::Host,
            value,
            unit,
        }
    }

    pub fn vm(name: &'static str, value: Value, unit: Option<&'static str>) -> Metric {
        Metric {
            name,
            context: Context::Vm,
            value,
            unit,
        }
    }
}

/// The page as KubeVirt writes it (Go's `xml.MarshalIndent` with two
/// spaces), without a trailing newline.
pub fn to_xml(metrics: &[Metric]) -> String {
    let mut out = String::from("<metrics>");
    for metric in metrics {
        let _ = write!(
            out,
            "\n  <metric type=\"{}\" context=\"{}\"",
            metric.value.type_name(),
            metric.context.as_str()
        );
        if let Some(unit) = metric.unit {
            let _ = write!(out, " unit=\"{}\"", escape(unit));
        }
        let _ = write!(
            out,
            ">\n    <name>{}</name>\n    <value>{}</value>\n  </metric>",
            escape(metric.name),
            escape(&metric.value.text())
        );
    }
    if !metrics.is_empty() {
        out.push('\n');
    }
    out.push_str("</metrics>");
    out
}

/// Text and attribute values escaped as Go's `xml.EscapeText` does.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
    out
}

/// The disk's body for `metrics`: the page and a newline, which
/// `vm-dump-metrics` does not add when it prints the page.
pub fn disk_body(metrics: &[Metric]) -> Vec<u8> {
    let mut body = to_xml(metrics).into_bytes();
    body.push(b'\n');
    body
}

/// vhostmd's checksum: the bytes' sum as a wrapping 32-bit integer.
fn checksum(body: &[u8]) -> u32 {
    body.iter()
        .fold(0u32, |sum, &byte| sum.wrapping_add(u32::from(byte)))
}

fn header(busy: bool, sum: u32, length: u32) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&SIGNATURE);
    header[4..8].copy_from_slice(&u32::from(busy).to_be_bytes());
    header[8..12].copy_from_slice(&sum.to_be_bytes());
    header[12..16].copy_from_slice(&length.to_be_bytes());
    header
}

/// Rewrites the image `file` (at least [`DISK_SIZE`] bytes) with `body`,
/// busy flag first, as the module's description says.
pub fn write_disk(file: &File, body: &[u8]) -> io::Result<()> {
    if body.len() > MAX_BODY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the metrics page is {} bytes, more than the disk's {MAX_BODY_LEN}",
                body.len()
            ),
        ));
    }
    let sum = checksum(body);
    // At most MAX_BODY_LEN, checked above.
    let length = u32::try_from(body.len()).unwrap_or(u32::MAX);
    file.write_all_at(&header(true, sum, length), 0)?;
    file.sync_data()?;
    file.write_all_at(body, HEADER_LEN as u64)?;
    file.write_all_at(&header(false, sum, length), 0)?;
    Ok(())
}

/// Makes `file` (new and empty) the image of an empty page, as KubeVirt's
/// launcher creates it before the domain starts.
pub fn init_disk(file: &File) -> io::Result<()> {
    file.set_len(DISK_SIZE)?;
    write_disk(file, &disk_body(&[]))
}

/// What a reader finds on the disk.
#[derive(Debug, PartialEq, Eq)]
pub enum DiskRead {
    /// The page, its sum right.
    Page(String),
    /// A write is under way: read again.
    Busy,
}

/// Reads an image as vhostmd's libmetrics does: the header, then the body
/// its length gives, checked against its sum.
pub fn read_disk(image: &[u8]) -> Result<DiskRead, String> {
    let field = |at: usize| {
        image
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
            .ok_or_else(|| format!("the image is {} bytes, shorter than a header", image.len()))
    };
    if image.get(..4) != Some(&SIGNATURE[..]) {
        return Err("no vhostmd signature (mvbd)".to_string());
    }
    if field(4)? != 0 {
        return Ok(DiskRead::Busy);
    }
    let (sum, length) = (field(8)?, field(12)?);
    let length = usize::try_from(length).unwrap_or(usize::MAX);
    if length > MAX_BODY_LEN {
        return Err(format!(
            "a body of {length} bytes, more than {MAX_BODY_LEN}"
        ));
    }
    let body = image
        .get(HEADER_LEN..HEADER_LEN + length)
        .ok_or_else(|| format!("the image ends before its {length}-byte body"))?;
    if checksum(body) != sum {
        return Err(format!(
            "the body's sum is {}, the header says {sum}",
            checksum(body)
        ));
    }
    String::from_utf8(body.to_vec())
        .map(DiskRead::Page)
        .map_err(|e| format!("the body is not UTF-8: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    fn sample() -> Vec<Metric> {
        vec![
            Metric::host("HostName", Value::String("node-1".into()), None),
            Metric::vm("TotalCPUTime", Value::Real64(12.5), Some("s")),
            Metric::vm("ResourceProcessorLimit", Value::Int64(2), None),
            Metric::host("FreePhysicalMemory", Value::UInt64(307), Some("KiB")),
        ]
    }

    /// Byte for byte what Go's `xml.MarshalIndent(m, "", "  ")` makes of
    /// KubeVirt's `api.Metrics` with these metrics.
    #[test]
    fn the_page_is_kubevirts_xml() {
        assert_eq!(
            to_xml(&sample()),
            "<metrics>\n  <metric type=\"string\" context=\"host\">\n    <name>HostName</name>\n    <value>node-1</value>\n  </metric>\n  <metric type=\"real64\" context=\"vm\" unit=\"s\">\n    <name>TotalCPUTime</name>\n    <value>12.500000</value>\n  </metric>\n  <metric type=\"int64\" context=\"vm\">\n    <name>ResourceProcessorLimit</name>\n    <value>2</value>\n  </metric>\n  <metric type=\"uint64\" context=\"host\" unit=\"KiB\">\n    <name>FreePhysicalMemory</name>\n    <value>307</value>\n  </metric>\n</metrics>"
        );
        assert_eq!(to_xml(&[]), "<metrics></metrics>");
    }

    #[test]
    fn text_is_escaped_as_go_escapes_it() {
        let page = to_xml(&[Metric::host(
            "HostName",
            Value::String("a<b>&\"c'\n".into()),
            None,
        )]);
        assert!(
            page.contains("<value>a&lt;b&gt;&amp;&#34;c&#39;&#xA;</value>"),
            "{page}"
        );
    }

    #[test]
    fn a_new_disk_holds_an_empty_page() {
        let dir = ScratchDir::new("vhostmd-init");
        let path = dir.join("vhostmd0");
        let file = File::create(&path).unwrap();
        init_disk(&file).unwrap();
        let image = std::fs::read(&path).unwrap();
        assert_eq!(image.len() as u64, DISK_SIZE);
        assert_eq!(&image[..4], b"mvbd");
        assert_eq!(
            read_disk(&image),
            Ok(DiskRead::Page("<metrics></metrics>\n".into()))
        );
    }

    /// The header KubeVirt's testdata/vhostmd0 (written by vhostmd) has
    /// for its body: big-endian, busy 0, the byte sum, the length.
    #[test]
    fn the_header_is_vhostmds() {
        let dir = ScratchDir::new("vhostmd-header");
        let path = dir.join("vhostmd0");
        let file = File::create(&path).unwrap();
        file.set_len(DISK_SIZE).unwrap();
        let body = b"<metrics></metrics>\n";
        write_disk(&file, body).unwrap();
        let image = std::fs::read(&path).unwrap();
        let sum: u32 = body.iter().map(|&b| u32::from(b)).sum();
        let mut expected = b"mvbd\0\0\0\0".to_vec();
        expected.extend_from_slice(&sum.to_be_bytes());
        expected.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
        expected.extend_from_slice(body);
        assert_eq!(&image[..expected.len()], &expected[..]);
    }

    #[test]
    fn a_rewrite_with_a_shorter_page_reads_back_whole() {
        let dir = ScratchDir::new("vhostmd-rewrite");
        let path = dir.join("vhostmd0");
        let file = File::create(&path).unwrap();
        init_disk(&file).unwrap();
        write_disk(&file, &disk_body(&sample())).unwrap();
        write_disk(&file, &disk_body(&sample()[..1])).unwrap();
        let image = std::fs::read(&path).unwrap();
        assert_eq!(
            read_disk(&image),
            Ok(DiskRead::Page(format!("{}\n", to_xml(&sample()[..1]))))
        );
        assert_eq!(image.len() as u64, DISK_SIZE);
    }

    /// What a reader sees halfway through a write: the busy flag, or (had
    /// it read the header before the write began) a sum that is wrong.
    #[test]
    fn a_torn_read_is_busy_or_fails_its_sum() {
        let old = disk_body(&sample()[..1]);
        let new = disk_body(&sample());
        let mut image = vec![0u8; MAX_BODY_LEN + 24];
        image[..HEADER_LEN].copy_from_slice(&header(
            true,
            checksum(&new),
            u32::try_from(new.len()).unwrap(),
        ));
        image[HEADER_LEN..HEADER_LEN + old.len()].copy_from_slice(&old);
        assert_eq!(read_disk(&image), Ok(DiskRead::Busy));
        image[..HEADER_LEN].copy_from_slice(&header(
            false,
            checksum(&new),
            u32::try_from(new.len()).unwrap(),
        ));
        assert!(read_disk(&image).unwrap_err().contains("sum"));
    }

    #[test]
    fn bad_images_are_errors() {
        assert!(read_disk(b"").is_err());
        assert!(read_disk(b"mvbd").is_err());
        let mut image = header(false, 0, u32::MAX).to_vec();
        assert!(read_disk(&image).unwrap_err().contains("more than"));
        image = header(false, 0, 10).to_vec();
        assert!(read_disk(&image).unwrap_err().contains("ends before"));
        let dir = ScratchDir::new("vhostmd-big");
        let file = File::create(dir.join("vhostmd0")).unwrap();
        let err = write_disk(&file, &vec![b' '; MAX_BODY_LEN + 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
