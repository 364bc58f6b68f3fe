//! Unit tests of the ISO writer, checked by an independent reader of the
//! on-disk structure. No external program runs here: isoinfo, xorriso,
//! blkid and the kernel read the same images in tests/iso9660_tools.rs.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use super::cases::*;
use super::names::padded_cmp;
use super::*;

// -- helpers ------------------------------------------------------------

/// A number below `n` from a generated one.
fn below(random: u64, n: usize) -> usize {
    usize::try_from(random % u64::try_from(n).unwrap()).unwrap()
}

fn image_bytes(label: &str, files: &[IsoFile]) -> Vec<u8> {
    let mut out = Vec::new();
    write_iso(&mut out, label, files).unwrap_or_else(|e| panic!("write_iso failed: {e}"));
    out
}

/// Writes the image to a temp file (through `fs::File`) and checks that
/// it equals the in-memory rendering.
fn image_file(tag: &str, label: &str, files: &[IsoFile]) -> (TempPath, Vec<u8>) {
    let bytes = image_bytes(label, files);
    let path = TempPath::new(&format!("{tag}.iso"));
    let mut out = fs::File::create(path.path()).expect("create image file");
    write_iso(&mut out, label, files).expect("write_iso to file");
    drop(out);
    assert!(
        fs::read(path.path()).expect("read image back") == bytes,
        "file output differs from in-memory output"
    );
    (path, bytes)
}

// -- an independent reader that checks the on-disk structure -------------

#[derive(Debug, Clone)]
struct RawRecord {
    ident: Vec<u8>,
    location: u32,
    size: u32,
    is_dir: bool,
}

fn both32(b: &[u8]) -> u32 {
    let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let be = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    assert_eq!(le, be, "both-endian 32-bit field disagrees");
    le
}

fn both16(b: &[u8]) -> u16 {
    let le = u16::from_le_bytes([b[0], b[1]]);
    let be = u16::from_be_bytes([b[2], b[3]]);
    assert_eq!(le, be, "both-endian 16-bit field disagrees");
    le
}

fn sector(img: &[u8], n: u32) -> &[u8] {
    &img[n as usize * SECTOR_SIZE..][..SECTOR_SIZE]
}

fn parse_record(r: &[u8]) -> RawRecord {
    let len = r[0] as usize;
    let id_len = r[32] as usize;
    assert_eq!(
        len,
        33 + id_len + usize::from(id_len.is_multiple_of(2)),
        "record length"
    );
    assert_eq!(r[1], 0, "extended attribute length");
    assert_eq!(&r[18..25], &RECORD_DATE, "recording date");
    assert_eq!(both16(&r[28..32]), 1, "volume sequence number");
    RawRecord {
        ident: r[33..33 + id_len].to_vec(),
        location: both32(&r[2..10]),
        size: both32(&r[10..18]),
        is_dir: r[25] & 2 != 0,
    }
}

fn read_directory(img: &[u8], location: u32, size: u32) -> Vec<RawRecord> {
    assert!(
        size > 0 && (size as usize).is_multiple_of(SECTOR_SIZE),
        "directory size {size}"
    );
    let mut records = Vec::new();
    for s in 0..size / u32::try_from(SECTOR_SIZE).unwrap() {
        let data = sector(img, location + s);
        let mut off = 0;
        while off < SECTOR_SIZE {
            let len = data[off] as usize;
            if len == 0 {
                assert!(
                    data[off..].iter().all(|&b| b == 0),
                    "junk after last record"
                );
                break;
            }
            assert!(off + len <= SECTOR_SIZE, "record crosses a sector boundary");
            records.push(parse_record(&data[off..off + len]));
            off += len;
        }
    }
    records
}

fn units_of(ident: &[u8], joliet: bool) -> Vec<u16> {
    if joliet {
        assert!(ident.len().is_multiple_of(2), "odd Joliet identifier");
        ident
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect()
    } else {
        ident.iter().map(|&b| u16::from(b)).collect()
    }
}

/// (name, extension) as ECMA-119 9.3 orders them.
fn spec_key(r: &RawRecord, joliet: bool) -> (Vec<u16>, Vec<u16>) {
    let mut u = units_of(&r.ident, joliet);
    if r.is_dir {
        return (u, Vec::new());
    }
    if u.ends_with(&[u16::from(b';'), u16::from(b'1')]) {
        u.truncate(u.len() - 2);
    }
    match u.iter().rposition(|&c| c == u16::from(b'.')) {
        Some(p) if p > 0 || !joliet => (u[..p].to_vec(), u[p + 1..].to_vec()),
        _ => (u, Vec::new()),
    }
}

fn is_d_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn record_name(r: &RawRecord, joliet: bool) -> String {
    if joliet {
        return String::from_utf16(&units_of(&r.ident, true)).expect("Joliet name is UCS-2");
    }
    let s = String::from_utf8(r.ident.clone()).expect("ASCII identifier");
    if r.is_dir {
        assert!(
            (1..=8).contains(&s.len()) && is_d_chars(&s),
            "bad level 1 directory name {s:?}"
        );
        return s;
    }
    let stem = s.strip_suffix(";1").expect("file version ;1");
    let (name, ext) = stem.split_once('.').expect("file name has a '.'");
    assert!(
        name.len() <= 8 && ext.len() <= 3 && !(name.is_empty() && ext.is_empty()),
        "bad 8.3 name {s:?}"
    );
    assert!(
        is_d_chars(name) && is_d_chars(ext),
        "non d-characters in {s:?}"
    );
    stem.to_string()
}

#[derive(Debug, Default)]
struct ReadHierarchy {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    dir_sectors: BTreeMap<String, u32>,
}

fn read_hierarchy(img: &[u8], vd_sector: u32, joliet: bool) -> ReadHierarchy {
    let vd = sector(img, vd_sector);
    let root = parse_record(&vd[156..190]);
    assert_eq!(root.ident, vec![0]);
    assert!(root.is_dir);
    let pt_size = both32(&vd[132..140]) as usize;
    let l_loc = u32::from_le_bytes([vd[140], vd[141], vd[142], vd[143]]);
    let m_loc = u32::from_be_bytes([vd[148], vd[149], vd[150], vd[151]]);
    // (path, location, size, parent location, parent size, level)
    let mut dirs = vec![(
        String::new(),
        root.location,
        root.size,
        root.location,
        root.size,
        1,
    )];
    // Expected path table: (identifier, location, parent number).
    let mut path_table = vec![(vec![0u8], root.location, 1u16)];
    let mut out = ReadHierarchy::default();
    let mut i = 0;
    while i < dirs.len() {
        let (path, loc, size, parent_loc, parent_size, level) = dirs[i].clone();
        out.dir_sectors
            .insert(path.clone(), size / u32::try_from(SECTOR_SIZE).unwrap());
        let records = read_directory(img, loc, size);
        assert!(records.len() >= 2, "missing . and .. in {path:?}");
        let (dot, dotdot) = (&records[0], &records[1]);
        assert_eq!(
            (&dot.ident[..], dot.location, dot.size),
            (&[0u8][..], loc, size)
        );
        assert_eq!(
            (&dotdot.ident[..], dotdot.location, dotdot.size),
            (&[1u8][..], parent_loc, parent_size)
        );
        assert!(dot.is_dir && dotdot.is_dir);
        let entries = &records[2..];
        for pair in entries.windows(2) {
            let (a, b) = (spec_key(&pair[0], joliet), spec_key(&pair[1], joliet));
            let order = padded_cmp(&a.0, &b.0).then_with(|| padded_cmp(&a.1, &b.1));
            assert_eq!(
                order,
                Ordering::Less,
                "records out of order in {path:?}: {pair:?}"
            );
        }
        for r in entries {
            let name = record_name(r, joliet);
            let child = if path.is_empty() {
                name
            } else {
                format!("{path}/{name}")
            };
            if r.is_dir {
                assert!(level < MAX_DIRECTORY_LEVELS, "{child:?} is too deep");
                dirs.push((child.clone(), r.location, r.size, loc, size, level + 1));
                path_table.push((r.ident.clone(), r.location, u16::try_from(i + 1).unwrap()));
                assert!(out.dirs.insert(child), "duplicate directory");
            } else {
                let data = if r.size == 0 {
                    Vec::new()
                } else {
                    img[r.location as usize * SECTOR_SIZE..][..r.size as usize].to_vec()
                };
                assert!(out.files.insert(child, data).is_none(), "duplicate file");
            }
        }
        i += 1;
    }
    for (location, big_endian) in [(l_loc, false), (m_loc, true)] {
        let table = &img[location as usize * SECTOR_SIZE..][..pt_size];
        let mut parsed = Vec::new();
        let mut off = 0;
        while off < table.len() {
            let len = table[off] as usize;
            let (loc, parent) = if big_endian {
                (
                    u32::from_be_bytes(table[off + 2..off + 6].try_into().expect("4 bytes")),
                    u16::from_be_bytes([table[off + 6], table[off + 7]]),
                )
            } else {
                (
                    u32::from_le_bytes(table[off + 2..off + 6].try_into().expect("4 bytes")),
                    u16::from_le_bytes([table[off + 6], table[off + 7]]),
                )
            };
            parsed.push((table[off + 8..off + 8 + len].to_vec(), loc, parent));
            off += 8 + len + len % 2;
        }
        assert_eq!(parsed, path_table, "path table (big endian: {big_endian})");
    }
    out
}

/// Checks the whole image with the reader above; returns the primary
/// (8.3) and Joliet hierarchies.
fn check_structure(img: &[u8], label: &str, files: &[IsoFile]) -> (ReadHierarchy, ReadHierarchy) {
    assert_eq!(img.len() % SECTOR_SIZE, 0);
    assert!(
        img[..16 * SECTOR_SIZE].iter().all(|&b| b == 0),
        "system area"
    );
    let pvd = sector(img, 16);
    let svd = sector(img, 17);
    let term = sector(img, 18);
    assert_eq!(&pvd[..7], b"\x01CD001\x01");
    assert_eq!(&svd[..7], b"\x02CD001\x01");
    assert_eq!(&term[..7], b"\xffCD001\x01");
    assert_eq!(&svd[88..91], b"%/E", "Joliet escape sequence");
    for vd in [pvd, svd] {
        assert_eq!(
            both32(&vd[80..88]) as usize * SECTOR_SIZE,
            img.len(),
            "volume space size"
        );
        assert_eq!(both16(&vd[120..124]), 1);
        assert_eq!(both16(&vd[124..128]), 1);
        assert_eq!(both16(&vd[128..132]), 2048);
        assert_eq!(&vd[813..830], VOLUME_DATE);
        assert_eq!(vd[881], 1);
    }
    assert_eq!(&pvd[40..72], format!("{label:<32}").as_bytes());
    let joliet_label: Vec<u16> = format!("{:<16}", label.chars().take(16).collect::<String>())
        .encode_utf16()
        .collect();
    assert_eq!(units_of(&svd[40..72], true), joliet_label);
    let primary = read_hierarchy(img, 16, false);
    let joliet = read_hierarchy(img, 17, true);
    assert_eq!(joliet.files, expected_map(files), "Joliet tree content");
    assert_eq!(joliet.dirs, expected_dirs(files), "Joliet directories");
    let mut a: Vec<&Vec<u8>> = primary.files.values().collect();
    let mut b: Vec<&Vec<u8>> = joliet.files.values().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "primary and Joliet trees hold different data");
    assert_eq!(primary.dirs.len(), joliet.dirs.len());
    (primary, joliet)
}

// -- checks with the real tools -------------------------------------------

/// Writes the image (to memory and to a file) and reads it back with the
/// independent reader above. The same inputs are read by isoinfo, xorriso
/// and blkid in tests/iso9660_tools.rs.
fn check_image(tag: &str, label: &str, files: &[IsoFile]) -> (TempPath, Vec<u8>) {
    let (iso, bytes) = image_file(tag, label, files);
    check_structure(&bytes, label, files);
    (iso, bytes)
}

// -- tests --------------------------------------------------------------

#[test]
fn nocloud_cidata_image() {
    let files = nocloud_files();
    let (_, bytes) = check_image("nocloud", "cidata", &files);
    let (primary, _) = check_structure(&bytes, "cidata", &files);
    let names: Vec<&String> = primary.files.keys().collect();
    assert_eq!(names, ["META_DAT.", "NETWORK_.", "USER_DAT."]);
}

#[test]
fn configdrive_image_with_directories() {
    let files = configdrive_files();
    let (_, bytes) = check_image("configdrive", "config-2", &files);
    let (_, joliet) = check_structure(&bytes, "config-2", &files);
    assert!(
        joliet.dirs.contains("openstack/latest"),
        "{:?}",
        joliet.dirs
    );
}

#[test]
fn empty_file_list() {
    let (_, bytes) = check_image("empty", "cidata", &[]);
    // 16 system sectors, 3 descriptors, 4 path tables, 2 root directories.
    assert_eq!(bytes.len(), 25 * SECTOR_SIZE);
}

#[test]
fn zero_length_and_multi_sector_files() {
    check_image("sizes", "cidata", &sized_files());
}

#[test]
fn many_files_in_one_directory() {
    let files = many_files();
    let (_, bytes) = check_image("many", "cfgdata", &files);
    let (primary, joliet) = check_structure(&bytes, "cfgdata", &files);
    // All 300 long names shorten to APPLICAT.PRO and must be made unique.
    assert_eq!(primary.files.len(), 301);
    assert!(
        primary.dir_sectors["CONF_D"] > 1,
        "{:?}",
        primary.dir_sectors
    );
    assert!(joliet.dir_sectors["conf.d"] > 1, "{:?}", joliet.dir_sectors);
}

#[test]
fn deepest_allowed_nesting() {
    let files = deep_files();
    let (_, bytes) = check_image("deep", "cidata", &files);
    let (primary, _) = check_structure(&bytes, "cidata", &files);
    assert!(primary.dirs.contains("L2/L3/L4/L5/L6/L7/L8"));
    let too_deep = [file("l2/l3/l4/l5/l6/l7/l8/l9/file.txt", "x")];
    match write_iso(&mut io::sink(), "cidata", &too_deep) {
        Err(IsoError::InvalidPath { reason, .. }) => assert!(reason.contains("too deep")),
        other => panic!("expected InvalidPath, got {other:?}"),
    }
}

#[test]
fn names_colliding_after_mangling() {
    let files = colliding_files();
    let (_, bytes) = check_image("collide", "cidata", &files);
    let (primary, _) = check_structure(&bytes, "cidata", &files);
    let root: Vec<&String> = primary.files.keys().filter(|k| !k.contains('/')).collect();
    assert_eq!(root.len(), 15, "{root:?}");
    // The first name in byte order keeps the natural 8.3 name.
    assert!(primary.files.contains_key("USER_DAT."));
    assert!(primary.files.contains_key("USER_DA1."));
}

#[test]
fn non_ascii_names_in_joliet() {
    check_image("unicode", "cidata", &unicode_files());
}

#[test]
fn invalid_paths_are_rejected() {
    let cases: Vec<(&str, String)> = vec![
        ("", "empty".into()),
        ("/etc/passwd", "absolute".into()),
        ("a//b", "empty component".into()),
        ("a/", "empty component".into()),
        ("../x", "\"..\"".into()),
        ("a/../b", "\"..\"".into()),
        ("./a", "\".\"".into()),
        (".", "\".\"".into()),
        ("a:b", "':'".into()),
        ("a\\b", "'\\\\'".into()),
        ("semi;1", "';'".into()),
        ("tab\there", "control".into()),
        ("nul\0", "control".into()),
        ("emoji-\u{1F600}", "Basic Multilingual Plane".into()),
        ("trailing.", "ends with '.'".into()),
        (&*"y".repeat(65).leak(), "at most 64".into()),
        ("1/2/3/4/5/6/7/8/9", "too deep".into()),
    ];
    for (path, needle) in cases {
        let files = [file(path, "x")];
        match write_iso(&mut Vec::new(), "cidata", &files) {
            Err(err @ IsoError::InvalidPath { .. }) => {
                let msg = err.to_string();
                assert!(msg.contains(&needle), "{path:?}: {msg}");
                assert!(err.source().is_none());
            }
            other => panic!("{path:?}: expected InvalidPath, got {other:?}"),
        }
    }
    let conflicts = [
        vec![file("a", "1"), file("a", "2")],
        vec![file("a", "1"), file("a/b", "2")],
        vec![file("a/b", "1"), file("a", "2")],
    ];
    for files in conflicts {
        let mut out = Vec::new();
        let err = write_iso(&mut out, "cidata", &files).expect_err("conflict");
        assert!(matches!(err, IsoError::InvalidPath { .. }), "{err:?}");
        assert!(out.is_empty(), "nothing may be written for invalid input");
    }
}

#[test]
fn volume_ids() {
    for bad in [
        "",
        " cidata",
        "cidata ",
        "ci/data",
        "cidätä",
        "a*",
        &"v".repeat(33),
    ] {
        match write_iso(&mut io::sink(), bad, &[]) {
            Err(err @ IsoError::InvalidVolumeId(_)) => {
                let msg = err.to_string();
                assert!(msg.contains("volume label"), "{msg}");
            }
            other => panic!("{bad:?}: expected InvalidVolumeId, got {other:?}"),
        }
    }
    // The longest label: Joliet holds 16 characters, blkid merges the rest
    // from the primary descriptor.
    let long = "CONFIG-DRIVE_with.long+label-32c";
    assert_eq!(long.len(), 32);
    check_image("label32", long, &[file("a", "b")]);
    check_image("labelcase", "CIDATA", &[file("a", "b")]);
}

#[test]
fn output_is_deterministic_and_order_independent() {
    let mut files = configmap_files(50);
    files.extend(nocloud_files());
    files.push(file("sub/dir/file", pattern(5000, 9)));
    let first = image_bytes("cidata", &files);
    let second = image_bytes("cidata", &files);
    assert!(first == second, "two runs differ");
    files.reverse();
    let reversed = image_bytes("cidata", &files);
    assert!(first == reversed, "input order changed the image");
    let (a, a_bytes) = image_file("det-a", "cidata", &files);
    let (b, b_bytes) = image_file("det-b", "cidata", &files);
    assert!(a_bytes == first && b_bytes == first);
    assert!(fs::read(a.path()).expect("a") == fs::read(b.path()).expect("b"));
}

#[test]
fn too_large_file() {
    // calloc'ed, so this costs address space, not memory.
    let files = [IsoFile {
        path: "huge.img".into(),
        data: vec![0u8; usize::try_from(MAX_FILE_SIZE).unwrap() + 1],
    }];
    let mut out = Vec::new();
    match write_iso(&mut out, "cidata", &files) {
        Err(err @ IsoError::TooLarge { .. }) => {
            let msg = err.to_string();
            assert!(
                msg.contains("huge.img") && msg.contains("4294967295"),
                "{msg}"
            );
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(out.is_empty());
}

#[test]
fn write_errors_are_reported() {
    struct Failing;
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let err = write_iso(&mut Failing, "cidata", &nocloud_files()).expect_err("must fail");
    assert!(matches!(&err, IsoError::Io(e) if e.kind() == io::ErrorKind::StorageFull));
    assert!(err.to_string().contains("disk full"), "{err}");
    assert!(err.source().is_some());
    let converted: IsoError = io::Error::other("x").into();
    assert!(matches!(converted, IsoError::Io(_)));
}

/// Random (but reproducible) inputs: never a panic, and every image that
/// is produced passes the structural checks.
#[test]
fn random_inputs_never_panic() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let pieces = [
        "a",
        "B",
        "c.d",
        "é",
        "日",
        ".",
        "..",
        "",
        "-",
        "_",
        " ",
        "*",
        ";1",
        "x.tar.gz",
        "\u{1F600}",
        "\0",
        "LONGNAME",
        "longname",
        "~",
        "%",
    ];
    let labels = ["cidata", "config-2", "", "x y", "ÿ", "CIDATA"];
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..400 {
        let count = (next() % 8) as usize;
        let mut files = Vec::new();
        for _ in 0..count {
            let depth = 1 + (next() % 10) as usize;
            let mut parts = Vec::new();
            for _ in 0..depth {
                let n = 1 + (next() % 3) as usize;
                let part: String = (0..n)
                    .map(|_| pieces[below(next(), pieces.len())])
                    .collect();
                parts.push(part);
            }
            let mut path = parts.join("/");
            if next() % 20 == 0 {
                path.insert(0, '/');
            }
            files.push(file(
                &path,
                pattern(below(next(), 5000), next().to_le_bytes()[0].into()),
            ));
        }
        let label = labels[below(next(), labels.len())];
        let mut out = Vec::new();
        match write_iso(&mut out, label, &files) {
            Ok(()) => {
                check_structure(&out, label, &files);
                ok += 1;
            }
            Err(err) => {
                assert!(!err.to_string().is_empty());
                assert!(out.is_empty());
                rejected += 1;
            }
        }
    }
    assert!(ok > 20 && rejected > 20, "ok {ok}, rejected {rejected}");
}

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

#[test]
fn collect_dir_follows_kubernetes_atomic_writer_layout() {
    let outside = TempPath::new("outside");
    fs::create_dir_all(outside.path().join("dir")).expect("outside dir");
    fs::write(outside.path().join("secret"), "host file").expect("outside file");
    fs::write(outside.path().join("dir/x"), "host dir file").expect("outside file");

    let vol = TempPath::new("configmap");
    let root = vol.path();
    let ts = root.join("..2024_01_01_00_00_00.123456789");
    fs::create_dir_all(ts.join("nested")).expect("mkdir");
    fs::write(ts.join("user-data"), "#cloud-config\n").expect("write");
    fs::write(ts.join("meta-data"), "instance-id: x\n").expect("write");
    fs::write(ts.join("nested/deep.txt"), "deep").expect("write");
    symlink("..2024_01_01_00_00_00.123456789", root.join("..data"));
    symlink("..data/user-data", root.join("user-data"));
    symlink("..data/meta-data", root.join("meta-data"));
    symlink("..data/nested", root.join("nested"));
    fs::write(root.join(".hidden"), "dot file").expect("write");
    fs::create_dir_all(root.join("plain/dir")).expect("mkdir");
    fs::write(root.join("plain/dir/file.txt"), "plain").expect("write");
    fs::create_dir_all(root.join("empty-dir")).expect("mkdir");
    symlink(outside.path().join("secret"), root.join("outside-file"));
    symlink(outside.path().join("dir"), root.join("outside-dir"));
    symlink("..data/missing", root.join("dangling"));
    symlink(".", root.join("loop"));
    symlink("../..", root.join("plain/dir/up"));
    symlink("self", root.join("self"));
    // A special file (a socket here; FIFOs and devices likewise) is skipped.
    let _socket = std::os::unix::net::UnixListener::bind(root.join("socket")).expect("bind");

    let files = collect_dir(root).expect("collect_dir");
    let got: Vec<(&str, &[u8])> = files
        .iter()
        .map(|f| (f.path.as_str(), &f.data[..]))
        .collect();
    assert_eq!(
        got,
        vec![
            (".hidden", &b"dot file"[..]),
            ("meta-data", b"instance-id: x\n"),
            ("nested/deep.txt", b"deep"),
            ("plain/dir/file.txt", b"plain"),
            ("user-data", b"#cloud-config\n"),
        ]
    );
    // Through a symlink to the volume, as a pod sees it.
    let alias = TempPath::new("alias");
    symlink(root, alias.path());
    assert_eq!(collect_dir(alias.path()).expect("via symlink"), files);

    check_image("collected", "cfgdata", &files);
}

#[test]
fn collect_dir_errors() {
    let missing = TempPath::new("missing");
    match collect_dir(missing.path()) {
        Err(err @ IsoError::Io(_)) => {
            let msg = err.to_string();
            assert!(msg.contains(&missing.path().display().to_string()), "{msg}");
            assert!(err.source().is_some());
        }
        other => panic!("expected Io, got {other:?}"),
    }
    let plain = TempPath::new("plain-file");
    fs::write(plain.path(), "x").expect("write");
    assert!(matches!(
        collect_dir(plain.path()),
        Err(IsoError::InvalidPath { .. })
    ));

    let deep = TempPath::new("deep");
    let mut dir = deep.path().to_path_buf();
    for level in 2..=9 {
        dir.push(format!("l{level}"));
    }
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join("f"), "x").expect("write");
    match collect_dir(deep.path()) {
        Err(IsoError::InvalidPath { reason, .. }) => assert!(reason.contains("too deep")),
        other => panic!("expected InvalidPath, got {other:?}"),
    }
    let bad = TempPath::new("non-utf8");
    fs::create_dir_all(bad.path()).expect("mkdir");
    fs::write(
        bad.path().join(OsString::from_vec(b"bad\xff".to_vec())),
        "x",
    )
    .expect("write");
    assert!(matches!(
        collect_dir(bad.path()),
        Err(IsoError::InvalidPath { .. })
    ));
}
