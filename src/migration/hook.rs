//! KubeVirt's target-side pre-migration hook (VEP-141,
//! docs/devel/migration-premigration-hooks.md in KubeVirt's tree).
//!
//! On the target node libvirt runs `/etc/libvirt/hooks/qemu <domain>
//! migrate begin -` as an incoming migration begins, with the domain XML
//! the source sent on its standard input, and takes what the hook prints
//! as the domain to start. KubeVirt's image has its hook client there; it
//! sends the XML to `/var/run/kubevirt/migration-hook-socket`, which the
//! target pod's launcher serves from SyncMigrationTarget until one
//! connection has been answered, and prints the reply. The launcher
//! rewrites the XML so that it fits its own pod: KubeVirt's source no
//! longer does (it sends libvirt's migratable XML as it is), so this is
//! where a source pod laid out differently (another launcher version,
//! another namespace) or pinned to other host CPUs is reconciled.
//!
//! This launcher is both ends: in KubeVirt mode it installs itself as the
//! pod's `qemu` hook ([`install`]; the binary run under the name `qemu`,
//! or as `virt-launcher libvirt-hook qemu ...`, is the hook client,
//! [`client_if_requested`]) and serves the socket ([`HookServer`]) with
//! what its converter made of the VMI for this pod ([`TargetFit`]).
//! Client and server speak KubeVirt's protocol (the XML, then the
//! rewritten XML and the connection closed; closed without a reply on
//! failure), so either works with KubeVirt's other half.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;
use serde::Serialize;

use crate::domxml::Domain;
use crate::threads::FatalSender;

/// The server's socket, in the share directory (KubeVirt's
/// `/var/run/kubevirt/migration-hook-socket`).
pub const SOCKET_NAME: &str = "migration-hook-socket";
/// Where the hook client dials: the pod's share directory.
pub const CLIENT_SOCKET: &str = "/var/run/kubevirt/migration-hook-socket";
/// Where libvirt looks for its QEMU driver's hook.
pub const HOOK_PATH: &str = "/etc/libvirt/hooks/qemu";
/// Created on the source when the domain has migrated away, in the
/// backend storage (persistent TPM and EFI state) if the pod has it: how
/// virt-controller tells an interrupted migration's outcome.
pub const MIGRATED_MARKER: &str = "/run/kubevirt-private/backend-storage-meta/migrated";
/// The hidden subcommand that runs the hook client.
pub const SUBCOMMAND: &str = "libvirt-hook";
/// KubeVirt's client's and server's time limits.
const TIMEOUT: Duration = Duration::from_secs(30);
/// A domain XML is tens of KiB; anything this large is refused.
const MAX_XML: usize = 16 << 20;
/// How deep the incoming domain's elements may nest (libvirt's nest about
/// 6 deep).
const MAX_DEPTH: usize = 256;

/// What the incoming domain must have to fit this pod, from the domain
/// this launcher's converter made of the VMI here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetFit {
    disks: Vec<DiskFit>,
    /// With dedicated CPUs: this pod's pinning.
    cpu: Option<CpuFit>,
}

#[derive(Debug, Clone, PartialEq)]
struct DiskFit {
    alias: Option<String>,
    dev: String,
    file: String,
}

/// The elements that pin the guest to host CPUs and NUMA nodes, as this
/// launcher writes them (`None`: this pod's domain has none).
#[derive(Debug, Clone, Default, PartialEq)]
struct CpuFit {
    vcpu: Option<String>,
    cputune: Option<String>,
    numatune: Option<String>,
    topology: Option<String>,
}

fn element<T: Serialize>(tag: &str, value: Option<&T>) -> Result<Option<String>, String> {
    value
        .map(|v| Domain::device_xml(tag, v).map_err(|e| e.to_string()))
        .transpose()
}

impl TargetFit {
    /// From this pod's converted `domain`; `dedicated_cpus`: the VMI asks
    /// for dedicated CPUs (KubeVirt's `CPUDedicatedHook` runs only then).
    pub fn of(domain: &Domain, dedicated_cpus: bool) -> Result<TargetFit, String> {
        let disks = domain
            .devices
            .disks
            .iter()
            .filter_map(|d| {
                let file = d.source.as_ref()?.file.clone()?;
                Some(DiskFit {
                    alias: d.alias.as_ref().map(|a| a.name.clone()),
                    dev: d.target.dev.clone(),
                    file,
                })
            })
            .collect();
        let cpu = if dedicated_cpus {
            Some(CpuFit {
                vcpu: element("vcpu", domain.vcpu.as_ref())?,
                cputune: element("cputune", domain.cputune.as_ref())?,
                numatune: element("numatune", domain.numatune.as_ref())?,
                topology: element(
                    "topology",
                    domain.cpu.as_ref().and_then(|c| c.topology.as_ref()),
                )?,
            })
        } else {
            None
        };
        Ok(TargetFit { disks, cpu })
    }

    /// This pod's file for the incoming disk: by its user alias, else by
    /// its target device.
    fn disk_file(&self, alias: Option<&str>, dev: Option<&str>) -> Option<&str> {
        let found = match alias {
            Some(alias) => self
                .disks
                .iter()
                .find(|d| d.alias.as_deref() == Some(alias)),
            None => dev.and_then(|dev| self.disks.iter().find(|d| d.dev == dev)),
        };
        found.map(|d| d.file.as_str())
    }
}

/// A `<disk>` of the incoming domain, as read.
#[derive(Default)]
struct IncomingDisk {
    /// The `<source file=…>` value's bytes in the document, and the value.
    file: Option<(Range<usize>, String)>,
    alias: Option<String>,
    dev: Option<String>,
}

/// Where a top-level element (or `<cpu><topology>`) of the incoming domain
/// is: its whole span.
#[derive(Default)]
struct Spans {
    vcpu: Option<Range<usize>>,
    cputune: Option<Range<usize>>,
    numatune: Option<Range<usize>>,
    topology: Option<Range<usize>>,
    /// `<cpu>`: where a missing `<topology>` goes (after its start tag),
    /// or its empty tag's `/>`.
    cpu_inside: Option<usize>,
    cpu_empty_close: Option<Range<usize>>,
    /// `</domain>`: where missing elements go (libvirt reads the domain's
    /// elements in any order).
    root_end: Option<usize>,
}

fn attribute(
    input: &str,
    start: &BytesStart<'_>,
    name: &str,
) -> Result<Option<(Range<usize>, String)>, String> {
    for attr in start.attributes() {
        let attr = attr.map_err(|e| format!("malformed attribute: {e}"))?;
        if attr.key.as_ref() != name {
            continue;
        }
        let raw: &str = &attr.value;
        let at = (raw.as_ptr() as usize)
            .checked_sub(input.as_ptr() as usize)
            .filter(|at| at + raw.len() <= input.len())
            .ok_or("an attribute outside the document")?;
        let value = attr
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|e| format!("malformed attribute value: {e}"))?
            .into_owned();
        return Ok(Some((at..at + raw.len(), value)));
    }
    Ok(None)
}

/// Rewrites the incoming domain XML to fit this pod, as KubeVirt's hook
/// functions do: every disk's source file becomes this pod's file for the
/// same disk (`DiskSourcePathHook`), and with dedicated CPUs the vCPU
/// count, CPU pinning, NUMA tuning and topology become this pod's
/// (`CPUDedicatedHook`). Everything else is left as it was, byte for
/// byte. Returns the XML and what was changed, one line per change.
pub fn fit_incoming(xml: &str, fit: &TargetFit) -> Result<(String, Vec<String>), String> {
    let mut reader = Reader::from_str(xml);
    let mut path: Vec<String> = Vec::with_capacity(8);
    let mut disk: Option<IncomingDisk> = None;
    let mut spans = Spans::default();
    let mut opened: Option<usize> = None;
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut changes = Vec::new();
    loop {
        let before = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = reader
            .read_event()
            .map_err(|e| format!("malformed XML at byte {}: {e}", reader.error_position()))?;
        let after = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let (start, empty) = match &event {
            Event::Start(s) => (Some(s), false),
            Event::Empty(s) => (Some(s), true),
            _ => (None, false),
        };
        if let Some(start) = start {
            let name = start.name().as_ref().to_string();
            if path.is_empty() && name != "domain" {
                return Err(format!("the root element is <{name}>, not <domain>"));
            }
            if path.len() >= MAX_DEPTH {
                return Err("elements nest too deep".into());
            }
            let at: Vec<&str> = path.iter().map(String::as_str).collect();
            match (at.as_slice(), name.as_str()) {
                (["domain", "devices"], "disk") => disk = Some(IncomingDisk::default()),
                (["domain", "devices", "disk"], tag) => {
                    if let Some(d) = disk.as_mut() {
                        match tag {
                            "source" => d.file = attribute(xml, start, "file")?,
                            "alias" => d.alias = attribute(xml, start, "name")?.map(|a| a.1),
                            "target" => d.dev = attribute(xml, start, "dev")?.map(|a| a.1),
                            _ => {}
                        }
                    }
                }
                (["domain"], "vcpu" | "cputune" | "numatune") | (["domain", "cpu"], "topology") => {
                    opened = Some(before)
                }
                (["domain"], "cpu") if empty => {
                    spans.cpu_empty_close = Some(after.saturating_sub(2)..after)
                }
                (["domain"], "cpu") => spans.cpu_inside = Some(after),
                _ => {}
            }
            if empty {
                close(&path, &name, before..after, &mut opened, &mut spans);
                finish_disk(&path, &name, &mut disk, fit, &mut edits, &mut changes);
            } else {
                path.push(name);
            }
            continue;
        }
        match event {
            Event::End(_) => {
                let Some(name) = path.pop() else {
                    return Err("an end tag with no open element".into());
                };
                if path.is_empty() {
                    spans.root_end = Some(before);
                }
                close(&path, &name, before..after, &mut opened, &mut spans);
                finish_disk(&path, &name, &mut disk, fit, &mut edits, &mut changes);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let root_end = spans.root_end.ok_or("no <domain> element")?;
    if let Some(cpu) = &fit.cpu {
        for (tag, incoming, ours) in [
            ("vcpu", spans.vcpu.clone(), &cpu.vcpu),
            ("cputune", spans.cputune.clone(), &cpu.cputune),
            ("numatune", spans.numatune.clone(), &cpu.numatune),
        ] {
            match (incoming, ours) {
                (Some(range), Some(ours)) => {
                    if xml[range.clone()] != **ours {
                        changes.push(format!("<{tag}>: {} -> {ours}", &xml[range.clone()]));
                        edits.push((range, ours.clone()));
                    }
                }
                (Some(range), None) => {
                    changes.push(format!("<{tag}>: {} removed", &xml[range.clone()]));
                    edits.push((range, String::new()));
                }
                (None, Some(ours)) => {
                    changes.push(format!("<{tag}>: {ours} added"));
                    edits.push((root_end..root_end, ours.clone()));
                }
                (None, None) => {}
            }
        }
        match (spans.topology.clone(), &cpu.topology) {
            (Some(range), Some(ours)) if xml[range.clone()] != **ours => {
                changes.push(format!("<topology>: {} -> {ours}", &xml[range.clone()]));
                edits.push((range, ours.clone()));
            }
            (None, Some(ours)) => {
                if let Some(at) = spans.cpu_inside {
                    changes.push(format!("<topology>: {ours} added"));
                    edits.push((at..at, ours.clone()));
                } else if let Some(range) = spans.cpu_empty_close.clone() {
                    changes.push(format!("<topology>: {ours} added"));
                    edits.push((range, format!(">{ours}</cpu>")));
                }
            }
            _ => {}
        }
    }
    // From the end, so that earlier ranges stay where they were.
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = xml.to_string();
    let mut floor = usize::MAX;
    for (range, text) in edits {
        if range.end > floor || range.start > range.end || range.end > out.len() {
            return Err("overlapping changes to the domain XML".into());
        }
        floor = range.start;
        out.replace_range(range, &text);
    }
    Ok((out, changes))
}

/// An element of `path`'s parent ended at `range`: records the span of the
/// tracked ones.
fn close(
    parent: &[String],
    name: &str,
    range: Range<usize>,
    opened: &mut Option<usize>,
    spans: &mut Spans,
) {
    let at: Vec<&str> = parent.iter().map(String::as_str).collect();
    let slot = match (at.as_slice(), name) {
        (["domain"], "vcpu") => &mut spans.vcpu,
        (["domain"], "cputune") => &mut spans.cputune,
        (["domain"], "numatune") => &mut spans.numatune,
        (["domain", "cpu"], "topology") => &mut spans.topology,
        _ => return,
    };
    if let Some(start) = opened.take() {
        *slot = Some(start..range.end);
    }
}

/// A `<disk>` of `<devices>` ended: its source file becomes this pod's.
fn finish_disk(
    parent: &[String],
    name: &str,
    disk: &mut Option<IncomingDisk>,
    fit: &TargetFit,
    edits: &mut Vec<(Range<usize>, String)>,
    changes: &mut Vec<String>,
) {
    if name != "disk" || parent.len() != 2 || parent[1] != "devices" {
        return;
    }
    let Some(d) = disk.take() else { return };
    let Some((range, file)) = d.file else { return };
    let Some(ours) = fit.disk_file(d.alias.as_deref(), d.dev.as_deref()) else {
        return;
    };
    if ours != file {
        changes.push(format!(
            "disk {}: {file} -> {ours}",
            d.alias.or(d.dev).unwrap_or_default()
        ));
        edits.push((range, quick_xml::escape::escape(ours).into_owned()));
    }
}

/// The migration hook socket of a pod, served from SyncMigrationTarget
/// until it has answered one connection (or the launcher exits), as
/// KubeVirt's `PreMigrationHookServer`.
pub struct HookServer {
    fit: Arc<Mutex<TargetFit>>,
    listening: Arc<AtomicBool>,
    path: PathBuf,
}

impl HookServer {
    /// Listens on `path` (a stale socket there is replaced) and answers
    /// the first connection with the incoming XML fitted to `fit`.
    pub fn start(path: PathBuf, fit: TargetFit, fatal: &FatalSender) -> io::Result<HookServer> {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&path)?;
        let fit = Arc::new(Mutex::new(fit));
        let listening = Arc::new(AtomicBool::new(true));
        let server = HookServer {
            fit: fit.clone(),
            listening: listening.clone(),
            path: path.clone(),
        };
        crate::threads::spawn_named("migration-hook", fatal, move || {
            serve_one(&listener, &fit);
            listening.store(false, Ordering::SeqCst);
            drop(listener);
            if let Err(e) = fs::remove_file(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                log::warn!("migration hook: cannot remove {}: {e}", path.display());
            }
        })?;
        log::info!(
            "migration hook: serving {} until the incoming domain's XML has been fitted to this pod",
            server.path.display()
        );
        Ok(server)
    }

    /// Whether it still waits for its connection.
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    /// A later SyncMigrationTarget's view of the pod.
    pub fn update(&self, fit: TargetFit) {
        *self.fit.lock().unwrap_or_else(|e| e.into_inner()) = fit;
    }
}

/// A launcher that ends before the incoming domain arrived leaves no
/// socket behind (KubeVirt's server removes its own on stop).
impl Drop for HookServer {
    fn drop(&mut self) {
        if self.listening.swap(false, Ordering::SeqCst)
            && let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            log::warn!("migration hook: cannot remove {}: {e}", self.path.display());
        }
    }
}

fn serve_one(listener: &UnixListener, fit: &Mutex<TargetFit>) {
    let mut conn = match listener.accept() {
        Ok((conn, _)) => conn,
        Err(e) => {
            log::info!("migration hook: stopped accepting connections: {e}");
            return;
        }
    };
    let fit = fit.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match answer(&mut conn, &fit) {
        Ok(changes) if changes.is_empty() => {
            log::info!("migration hook: the incoming domain fits this pod as it is")
        }
        Ok(changes) => log::info!(
            "migration hook: fitted the incoming domain to this pod: {}",
            changes.join("; ")
        ),
        // Closed without a reply: the hook client fails, and libvirt the
        // incoming migration.
        Err(e) => log::error!("migration hook: {e}"),
    }
}

fn answer(conn: &mut UnixStream, fit: &TargetFit) -> Result<Vec<String>, String> {
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| format!("cannot set the connection's timeouts: {e}"))?;
    let xml = read_document(conn)?;
    let (out, changes) = fit_incoming(&xml, fit)?;
    conn.write_all(out.as_bytes())
        .map_err(|e| format!("cannot send the fitted XML: {e}"))?;
    Ok(changes)
}

/// Reads one XML document: up to the end of its root element (KubeVirt's
/// client does not close its end before it reads the reply) or the end of
/// the stream.
fn read_document(conn: &mut impl Read) -> Result<String, String> {
    let mut buf = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read the domain XML: {e}")),
        };
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_XML {
            return Err(format!("the domain XML is larger than {MAX_XML} bytes"));
        }
        if document_complete(&buf) {
            break;
        }
    }
    String::from_utf8(buf).map_err(|_| "the domain XML is not UTF-8".to_string())
}

/// Whether `buf` holds a whole root element.
fn document_complete(buf: &[u8]) -> bool {
    let text = match std::str::from_utf8(buf) {
        Ok(text) => text,
        // A character cut at the end: more to come.
        Err(e) if e.error_len().is_none() => return false,
        // Not UTF-8: read to the end and fail there.
        Err(_) => return false,
    };
    if !text.trim_end().ends_with('>') {
        return false;
    }
    let mut reader = Reader::from_str(text);
    let mut depth = 0usize;
    loop {
        match reader.read_event() {
            Ok(Event::Start(_)) => depth += 1,
            Ok(Event::End(_)) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return true;
                }
            }
            Ok(Event::Empty(_)) if depth == 0 => return true,
            Ok(Event::Eof) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

/// Installs this binary as the pod's QEMU hook (`/etc/libvirt/hooks/qemu`,
/// a symbolic link), before the libvirt daemon starts (it looks for hooks
/// only then). A hook already there (KubeVirt's client in an image that
/// has one) is kept: it speaks the same protocol. Returns whether it
/// installed one.
pub fn install(hook: &Path) -> io::Result<bool> {
    if let Ok(meta) = fs::symlink_metadata(hook) {
        // A link to a binary that is gone (an earlier container's) is
        // replaced; anything else is the image's.
        if !(meta.file_type().is_symlink() && fs::metadata(hook).is_err()) {
            return Ok(false);
        }
        fs::remove_file(hook)?;
    }
    let exe = std::env::current_exe()?;
    if let Some(dir) = hook.parent() {
        fs::create_dir_all(dir)?;
    }
    std::os::unix::fs::symlink(exe, hook)?;
    Ok(true)
}

/// The hook client, if this process is one: run under the name `qemu`
/// (as libvirt runs `/etc/libvirt/hooks/qemu`), or as `virt-launcher
/// libvirt-hook qemu <domain> <operation> <sub-operation> [<extra>]`.
/// Returns its exit status.
pub fn client_if_requested() -> Option<i32> {
    let mut argv = std::env::args_os();
    let argv0 = argv.next()?;
    let rest: Vec<OsString> = argv.collect();
    let args: Vec<String> = if Path::new(&argv0).file_name() == Some("qemu".as_ref()) {
        std::iter::once(argv0)
            .chain(rest)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    } else if rest.first().is_some_and(|a| a == SUBCOMMAND) {
        rest[1..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    } else {
        return None;
    };
    let stdin = io::stdin();
    let stdout = io::stdout();
    Some(
        match run_client(
            &args,
            &mut stdin.lock(),
            &mut stdout.lock(),
            Path::new(CLIENT_SOCKET),
            Path::new(MIGRATED_MARKER),
        ) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("Hook failed: {e}");
                1
            }
        },
    )
}

/// libvirt's hook arguments: `qemu <domain> <operation> <sub-operation>
/// [<extra>]`.
fn run_client(
    args: &[String],
    stdin: &mut impl Read,
    stdout: &mut impl Write,
    socket: &Path,
    marker: &Path,
) -> Result<(), String> {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
    match (arg(2), arg(3), arg(4)) {
        ("migrate", "begin", _) => {
            let mut xml = Vec::new();
            stdin
                .read_to_end(&mut xml)
                .map_err(|e| format!("cannot read the domain XML: {e}"))?;
            let reply = exchange(socket, &xml)?;
            stdout
                .write_all(&reply)
                .and_then(|()| stdout.flush())
                .map_err(|e| format!("failed to write response: {e}"))
        }
        ("release", "end", "migrated") => {
            let _ = io::copy(stdin, &mut io::sink());
            // Only a pod with backend storage has the directory.
            if marker.parent().is_some_and(Path::is_dir) {
                fs::File::create(marker)
                    .map_err(|e| format!("failed to create marker file: {e}"))?;
            }
            Ok(())
        }
        _ => {
            let _ = io::copy(stdin, &mut io::sink());
            Ok(())
        }
    }
}

fn exchange(socket: &Path, xml: &[u8]) -> Result<Vec<u8>, String> {
    let mut conn = UnixStream::connect(socket)
        .map_err(|e| format!("failed to connect to migration hook socket: {e}"))?;
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| format!("failed to set connection deadline: {e}"))?;
    conn.write_all(xml)
        .map_err(|e| format!("failed to send data: {e}"))?;
    // Our server stops at the end of the root element; KubeVirt's decoder
    // too. Closing our end tells either that nothing more comes.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    conn.read_to_end(&mut reply)
        .map_err(|e| format!("failed to read response: {e}"))?;
    if reply.is_empty() {
        return Err("hook processing failed on server".into());
    }
    Ok(reply)
}

#[cfg(test)]
mod tests;
