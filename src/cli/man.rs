//! The man page, generated from the flag, exit-code, command and event
//! tables so it cannot drift from the code. `man/virt-launcher.8` is this
//! output, checked in; a test fails when they differ, and another runs
//! `groff -ww` and `mandoc -Tlint` over it.
//!
//! Formatting rules: hyphenation is off (`.nh`) and lines are not
//! justified (`.ad l`), so a flag, path or class name is never split or
//! given a typographic hyphen when copied from the page; every literal `-`
//! is written `\-`; every text line stays within 80 bytes.

use super::FLAGS;
use super::subcommands::{SUBCOMMANDS, SubcommandSpec};
use crate::command::COMMANDS;
use crate::events::EventKind;
use crate::exit::ExitCode;

/// The page's date (`.TH`). Update it when the page's content changes.
pub const MAN_DATE: &str = "2026-12-01";

/// Longest text line the generator writes.
const MAX_LINE: usize = 80;

/// Escapes text for roff: backslashes and hyphens (every `-` in this page
/// is literal text: flags, paths, names).
fn roff(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// Escaped text as filled input lines of at most `MAX_LINE` bytes. A line
/// that would start with `.` or `'` (a roff request) is protected with `\&`.
fn fill(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in roff(text).split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > MAX_LINE {
            push_line(&mut out, &line);
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        push_line(&mut out, &line);
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    if line.starts_with('.') || line.starts_with('\'') {
        out.push_str("\\&");
    }
    out.push_str(line);
    out.push('\n');
}

pub fn man_page() -> String {
    let mut m = String::new();
    let version = roff(env!("CARGO_PKG_VERSION"));
    m.push_str(&format!(
        ".TH VIRT\\-LAUNCHER 8 {MAN_DATE} \"virt\\-launcher {version}\" \"System Administration\"\n"
    ));
    m.push_str(".nh\n.ad l\n");
    m.push_str(".SH NAME\nvirt\\-launcher \\- run one KubeVirt virtual machine instance through libvirt\nand QEMU\n");
    m.push_str(".SH SYNOPSIS\n.B virt\\-launcher\n\\fB\\-\\-name\\fR \\fINAME\\fR \\fB\\-\\-namespace\\fR \\fINAMESPACE\\fR [\\fIFLAGS\\fR]\n.br\n.B virt\\-launcher\n\\fB\\-\\-vmi\\fR \\fIFILE\\fR [\\fIFLAGS\\fR]\n");
    for sub in SUBCOMMANDS {
        m.push_str(&format!(".br\n.B virt\\-launcher {}\n", roff(sub.name)));
        m.push_str(&synopsis_lines(sub));
    }
    m.push_str(DESCRIPTION);
    m.push_str(".SH OPTIONS\n");
    m.push_str(OPTIONS_TEXT);
    for flag in FLAGS {
        m.push_str(".TP\n");
        let mut names = String::new();
        if let Some(c) = flag.short {
            names.push_str(&format!("\\fB\\-{c}\\fR, "));
        }
        names.push_str(&format!("\\fB\\-\\-{}\\fR", roff(flag.long)));
        if let Some(v) = flag.value_name() {
            names.push_str(&format!(" \\fI{}\\fR", roff(v)));
        }
        m.push_str(&names);
        m.push('\n');
        let mut text = flag.help.to_string();
        if let Some(d) = flag.default_text() {
            text.push_str(&format!(" Default: {d}."));
        }
        m.push_str(&fill(&text));
    }
    m.push_str(VALUES_TEXT);
    m.push_str(&subcommands_section());
    m.push_str(".SH COMMAND SOCKET\n");
    m.push_str(SOCKET_TEXT);
    m.push_str(".PP\nCommands:\n");
    for command in COMMANDS {
        m.push_str(&format!(".TP\n\\fB{}\\fR\n", roff(command.name)));
        m.push_str(&fill(command.summary));
    }
    m.push_str(".PP\nEvents (after \\fBsubscribe\\fR):\n");
    for kind in EventKind::ALL {
        m.push_str(&format!(".TP\n\\fB{}\\fR\n", roff(kind.name())));
        m.push_str(&fill(kind.summary()));
    }
    m.push_str(SIGNALS_TEXT);
    m.push_str(".SH EXIT STATUS\n");
    for code in ExitCode::ALL {
        m.push_str(&format!(".TP\n\\fB{}\\fR\n", code.code()));
        m.push_str(&fill(code.meaning()));
    }
    m.push_str(FILES_TEXT);
    m.push_str(LOGGING_TEXT);
    m.push_str(ENVIRONMENT_TEXT);
    m.push_str(EXAMPLES_TEXT);
    m.push_str(".SH SEE ALSO\n\\fBvirsh\\fR(1), \\fBlibvirtd\\fR(8), \\fBsocat\\fR(1), \\fBqemu\\-ga\\fR(8),\ndocs/protocol.md in the source tree\n");
    m
}

/// A subcommand's flags and operands for the SYNOPSIS, filled into lines;
/// a flag and its value stay on one input line.
fn synopsis_lines(sub: &SubcommandSpec) -> String {
    let mut items: Vec<String> = sub
        .flags
        .iter()
        .filter(|f| f.long != "help")
        .map(|f| match f.value {
            Some(v) => format!("[\\fB\\-\\-{}\\fR \\fI{}\\fR]", roff(f.long), roff(v)),
            None => format!("[\\fB\\-\\-{}\\fR]", roff(f.long)),
        })
        .collect();
    if let Some(operands) = sub.operands {
        items.push(format!("\\fI{}\\fR", roff(operands)));
    }
    let mut out = String::new();
    let mut line = String::new();
    for item in items {
        if !line.is_empty() && line.len() + 1 + item.len() > MAX_LINE {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&item);
    }
    if !line.is_empty() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// SUBCOMMANDS: each client subcommand, its description and its flags.
fn subcommands_section() -> String {
    let mut m = String::from(SUBCOMMANDS_TEXT);
    for sub in SUBCOMMANDS {
        m.push_str(&format!(".SS {}\n", roff(sub.name)));
        for (i, paragraph) in sub.description.split("\n\n").enumerate() {
            if i > 0 {
                m.push_str(".PP\n");
            }
            m.push_str(&fill(paragraph));
        }
        for flag in sub.flags {
            m.push_str(".TP\n");
            let mut names = String::new();
            if let Some(c) = flag.short {
                names.push_str(&format!("\\fB\\-{c}\\fR, "));
            }
            names.push_str(&format!("\\fB\\-\\-{}\\fR", roff(flag.long)));
            if let Some(v) = flag.value {
                names.push_str(&format!(" \\fI{}\\fR", roff(v)));
            }
            m.push_str(&names);
            m.push('\n');
            let mut text = flag.help.to_string();
            if let Some(d) = flag.default {
                text.push_str(&format!(" Default: {d}."));
            }
            m.push_str(&fill(&text));
        }
    }
    m
}

const SUBCOMMANDS_TEXT: &str = r#".SH SUBCOMMANDS
The same binary is a small client of a running launcher: each subcommand
connects to the launcher's command socket (see \fBCOMMAND SOCKET\fR),
speaks the same protocol, and has a \fB\-\-help\fR of its own. The socket is
\fB\-\-socket\fR, else \fIsockets/launcher\-sock\fR under
\fB\-\-kubevirt\-share\-dir\fR (default /var/run/kubevirt); the caller
needs the right to connect to it (it is mode 0600, so the launcher's own
user or root). Connecting, reading and writing are bounded by
\fB\-\-timeout\fR, so a subcommand never hangs on a launcher that is
wedged or gone. A subcommand exits with status 0 on success, 1 with a
one\-line reason on standard error when it failed (no launcher, a timeout,
an error from the launcher), and 2 for a bad command line.
"#;

const DESCRIPTION: &str = r#".SH DESCRIPTION
\fBvirt\-launcher\fR runs one virtual machine: it prepares the VMI's
directories, connects to libvirt, turns a KubeVirt VirtualMachineInstance
(JSON) into libvirt domain XML, starts and supervises the guest, and serves a
line\-delimited JSON command socket that \fBsocat\fR can drive by hand. When
the domain stops, the launcher sends the final event to subscribers, removes
its socket and exits; the exit status says why (see \fBEXIT STATUS\fR).
.PP
Start\-up: flags are parsed, the directories below are created, libvirt's
event loop is registered and the connection is opened (retried every 500 ms
for up to 15 s). The command socket listens as
\fIsockets/launcher\-init\-sock\fR; once the event loop runs and a ping
through that socket answers, it is renamed to \fIsockets/launcher\-sock\fR,
which is the sign that the launcher is ready. The launcher then waits up to
\fB\-\-qemu\-timeout\fR for a domain, from \fB\-\-vmi\fR or a \fBsync\fR
command.
.PP
With \fB\-\-connect test:///default\fR the launcher uses libvirt's
in\-process test driver, which needs no daemon and runs no guest: useful for
trying the protocol.
.SS Backends
Two builds of the launcher talk to libvirt in two ways; the command socket's
greeting and \fBquery\-version\fR say which one runs (\fBbackend\fR). The
default build (\fBvirt\fR) links libvirt's client library. The static build
(\fBwire\fR: one x86_64 musl executable without shared libraries, made by
\fIscripts/build\-static.sh\fR) speaks libvirt's RPC protocol itself over the
daemon's unix socket. It reaches \fBqemu:///system\fR
(\fI/run/libvirt/virtqemud\-sock\fR, else \fIlibvirt\-sock\fR),
\fBqemu:///session\fR (the same names under
\fI$XDG_RUNTIME_DIR/libvirt\fR), the daemons of \fB\-\-spawn\-libvirt\fR,
any of these with \fB?socket=\fR\fIPATH\fR, and \fBtest+unix:///default\fR,
libvirt's test driver served by a running libvirtd. It cannot run the
in\-process \fBtest:///default\fR and exits with status 4 saying to use
\fBtest+unix:///default\fR. It probes the daemon with a keepalive after 5 s
of silence and declares the connection lost after 5 unanswered probes, as
libvirt's client does; the launcher then reconnects, leaving the guest
running.
.SS KubeVirt mode
With \fB\-\-kubevirt\fR, or when the binary is called
\fBvirt\-launcher\-monitor\fR (as virt\-controller starts a KubeVirt pod,
with KubeVirt's flags, all accepted), the launcher is a drop\-in for KubeVirt's
own in its pod, driven by virt\-handler. \fIsockets/launcher\-sock\fR then
speaks KubeVirt's gRPC protocol (HTTP/2 without TLS on the unix socket; the
services \fBkubevirt.cmd.info.CmdInfo\fR, which negotiates version 1, and
\fBkubevirt.cmd.v1.Cmd\fR with its 36 calls, each run as the matching
command of the JSON protocol; a call it cannot do yet answers
\fBsuccess: false\fR naming it), listening as
\fIsockets/launcher\-init\-sock\fR until a version negotiation and a Ping
through it answer. The JSON protocol moves to
\fIsockets/launcher\-json\-sock\fR (\fIlauncher\-json\-init\-sock\fR
until ready), which \fBctl\fR, \fBprobe\fR and \fBfreeze\fR find by
\fB\-\-kubevirt\-share\-dir\fR. The launcher tells virt\-handler about its
domain through \fIKUBEVIRT_SHARE_DIR\fR/domain\-notify\-pipe.sock: ADDED
once the domain is defined (shut off, before it starts), MODIFIED on each
change of KubeVirt's api.Domain (state, devices, the guest agent's interfaces
and OS, kept once the guest stops), and last a MODIFIED of
a domain that no longer exists with its deletion time; a notify socket that
is missing or silent never holds up the launcher, which retries every
second. Without \fB\-\-connect\fR or \fB\-\-spawn\-libvirt\fR it starts
virtqemud (else libvirtd) with a copy of \fI/etc/libvirt/virtqemud.conf\fR in
\fI/var/run/libvirt\fR, and virtlogd, as plain supervised children, as
KubeVirt's launcher does inside its pod (as root). The daemon's PATH finds
any other QEMU emulator (\fIqemu\-system\-i386\fR, ...) first as a link to
\fIfalse\fR in \fI/var/run/libvirt/hidden\-emulators\fR, so that it probes
only \fIqemu\-system\-x86_64\fR (and logs the others' failed probes), as a
KubeVirt launcher image holds only that one. Once its domain stopped,
it waits up to 15 s for virt\-handler to delete it before exiting, as
KubeVirt's launcher waits for its final notification.
"#;

const OPTIONS_TEXT: &str = r#"A flag's value follows it as the next argument (\fB\-\-name vm1\fR) or
after an equals sign (\fB\-\-name=vm1\fR). A separate argument that starts
with \fB\-\fR, a lone \fB\-\fR included, is always read as a flag, never as
a value: \fB\-\-uid \-\-allow\-emulation\fR and \fB\-\-private\-dir \-\fR
are missing values; write \fB\-\-uid=\-x\fR for a value that starts with
\fB\-\fR. On/off flags take no value, or
\fB=true\fR or \fB=false\fR (also 1, t, T, TRUE, True and 0, f, F, FALSE,
False, as Go's flag package reads them); \fB=false\fR is the same as leaving
the flag out. Every argument must be UTF\-8. A bad command line exits with
status 2 and a message naming the flag, before any file is created. The value
syntaxes (DURATION, BYTES, N, SECONDS) and their ranges are defined under
\fBVALUES\fR below; a value out of its range is a bad command line too.
"#;

const VALUES_TEXT: &str = r#".SH VALUES
.TP
\fIDURATION\fR
One or more whole numbers, each followed by a unit: \fBms\fR
(milliseconds), \fBs\fR (seconds), \fBm\fR (minutes) or \fBh\fR (hours),
added up: \fB500ms\fR, \fB90s\fR, \fB5m\fR, \fB1h\fR, \fB4m30s\fR. A plain
whole number is seconds (\fB287\fR). No fractions, signs or spaces. At most
\fB87600h\fR (ten years), however it is written.
.TP
\fIBYTES\fR
A whole number of bytes, optionally followed by \fBKiB\fR (1024) or
\fBMiB\fR (1048576): \fB65536\fR, \fB64KiB\fR, \fB1MiB\fR. From 64 bytes to
\fB1024MiB\fR.
.TP
\fIN\fR
A whole number from 1 to 65536.
.TP
\fISECONDS\fR
A whole number of seconds from 0 to 315360000 (ten years).
"#;

const SOCKET_TEXT: &str = r#"The socket is \fIKUBEVIRT_SHARE_DIR\fR\fB/sockets/launcher\-sock\fR (mode
0600). Each line a client sends is one JSON object:
\fB{"execute":"NAME","arguments":{...},"id":ANY}\fR, where \fBarguments\fR
and \fBid\fR are optional. Each request gets exactly one reply line, in
order: \fB{"return":{...},"id":ANY}\fR or
\fB{"error":{"class":"C","desc":"...","causes":[...]},"id":ANY}\fR. On
connect the server writes a \fBhello\fR line with the protocol version, the
launcher version, its pid, the VMI and the command list. Error classes:
ParseError, RequestTooLarge, InvalidRequest, CommandNotFound,
InvalidArgument, InvalidState, NotFound, Unavailable, Timeout, Busy,
Internal. The full contract, with an example for every command and event,
is in docs/protocol.md.
"#;

const SIGNALS_TEXT: &str = r#".SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR, \fBSIGHUP\fR, \fBSIGQUIT\fR
Graceful stop, the same for all four. The launcher emits SHUTDOWN_STARTED
(naming the signal), asks the guest to power off by ACPI and repeats the
request every 5 seconds (a guest still booting misses the first); a paused
guest is resumed and frozen filesystems are thawed first. When the guest has
powered off the launcher exits with status 0. When it has not after
\fB\-\-grace\-period\-seconds\fR, the launcher emits SHUTDOWN_GRACE_EXPIRED,
forces the domain off and exits with status 7. A second signal does not
shorten the grace period. With no domain running the launcher exits at once
with status 0; during an outgoing migration the migration is cancelled
first; on a migration target the incoming migration is given up (status 9).
SIGHUP and SIGQUIT do not exit at once or dump core: that would leave the
socket behind and, with \fB\-\-spawn\-libvirt\fR, a QEMU that nothing
supervises.
.TP
\fBSIGUSR1\fR
Log the launcher's state (what \fBquery\-status\fR answers) at info level;
nothing else changes.
.TP
\fBSIGUSR2\fR
Upgrade in place: the same as the \fBupgrade\fR command without a binary
(the launcher's own path, read again from disk). The new binary is checked
first (\fB\-\-version\fR and \fB\-\-upgrade\-check\fR); then the
launcher execs it with the same PID, the command socket passed on (its file
never disappears) and the guest untouched. Refused (logged) while a
migration, a backup or a memory dump runs, and with \fB\-\-pod\-daemons\fR
or a non\-root launcher's own daemons. With \fB\-\-spawn\-libvirt\fR (as
root) the daemons, their namespace's init and QEMU run on, and the new
launcher supervises them. A graceful stop under way keeps its deadline.
A stop signal arriving during the hand\-over is acted on by the new
launcher.
.TP
\fBSIGPIPE\fR
Ignored: a client that went away shows as a failed write to it.
.TP
\fBSIGKILL\fR
Cannot be caught: the guest is not shut down. With \fB\-\-spawn\-libvirt\fR,
as root or not, the launcher's libvirt daemons, virtlogd, QEMU and any helper
they started run in a PID namespace whose init dies with the launcher, so the
kernel kills all of them at once, as when a pod dies; the guest loses what it
had not written to its disks. Without \fB\-\-spawn\-libvirt\fR the domain
belongs to the shared daemon behind \fB\-\-connect\fR, which the launcher
cannot and must not kill: the guest keeps running there until it is destroyed
(\fBvirsh destroy\fR).
Its socket and lock files stay behind; the next launcher finds them stale
(nobody holds the locks) and replaces them.
"#;

const FILES_TEXT: &str = r#".SH FILES
Directories are created with exactly the modes below, whatever the umask, and
a symbolic link where one belongs is refused, never followed. Files are
created without following symbolic links and without replacing anything.
.TP
\fIKUBEVIRT_SHARE_DIR\fR/sockets/ (0755)
.TQ
\fIKUBEVIRT_SHARE_DIR\fR/sockets/launcher\-init\-sock
.TQ
\fIKUBEVIRT_SHARE_DIR\fR/sockets/launcher\-sock
The command socket (0600), before and after readiness. Only a socket is
removed from these paths at start\-up, as stale; anything else there stops
the launcher with status 3.
.TP
\fIKUBEVIRT_SHARE_DIR\fR/sockets/launcher\-json\-init\-sock
.TQ
\fIKUBEVIRT_SHARE_DIR\fR/sockets/launcher\-json\-sock
In KubeVirt mode (\fB\-\-kubevirt\fR), the JSON protocol's socket, before
and after readiness; \fIlauncher\-sock\fR is then KubeVirt's gRPC socket.
.TP
\fIKUBEVIRT_SHARE_DIR\fR/domain\-notify\-pipe.sock
In KubeVirt mode: virt\-handler's notify socket, where the launcher sends
its domain events (not created by the launcher).
.TP
\fIKUBEVIRT_SHARE_DIR\fR/migration\-hook\-socket
In KubeVirt mode, on a migration target: from SyncMigrationTarget until the
incoming domain's XML has passed through it (one connection), the socket of
KubeVirt's target\-side pre\-migration hook. The XML the source sent comes in
and goes back fitted to this pod: each disk's source file is this pod's file
for that disk, and with dedicated CPUs the vCPU pinning, emulator pinning,
NUMA tuning and CPU topology are this pod's. Removed once answered.
.TP
/etc/libvirt/hooks/qemu
In KubeVirt mode, where the launcher starts the pod's libvirt daemon: a
symbolic link to the launcher's binary, made before the daemon starts unless
the image has a hook there already (KubeVirt's hook client, which speaks the
same protocol, is kept; only a link to a binary that no longer exists is
replaced). Run by libvirt as \fBqemu\fR \fIDOMAIN OPERATION SUB\-OPERATION
EXTRA\fR, the binary is the hook client: on \fBmigrate begin\fR it sends the
incoming domain XML to /var/run/kubevirt/migration\-hook\-socket and prints the
reply (exit status 1, which fails the incoming migration, when there is none);
on \fBrelease end migrated\fR it creates
/run/kubevirt\-private/backend\-storage\-meta/migrated if that directory (the
VMI's backend storage) exists; otherwise it does nothing.
\fBvirt\-launcher libvirt\-hook qemu\fR \fIDOMAIN OPERATION SUB\-OPERATION
EXTRA\fR runs the same client.
.TP
\fIKUBEVIRT_SHARE_DIR\fR/sockets/launcher\-sock.lock
.TQ
\fIPRIVATE_DIR\fR/virt\-launcher.lock
.TQ
\fIEPHEMERAL_DISK_DIR\fR/virt\-launcher.lock
Lock files (0600), held with \fBflock\fR(2) from the start until the exit, at
which they are removed: one launcher at a time per socket, private and
ephemeral directory. A second launcher that shares any of these directories
exits with status 3, before it contacts libvirt. A lock file that nobody
holds (its launcher was killed) does not count.
.TP
\fIPRIVATE_DIR\fR/vm\-disks, config\-map\-disks, secret\-disks, \
downwardapi\-disks, service\-account\-disk, sysprep\-disks, \
downwardmetrics\-channel (0750)
.TQ
\fIPRIVATE_DIR\fR/\fIUID\fR (0755)
Created at start\-up, as KubeVirt does. The serial console socket is
\fIPRIVATE_DIR\fR/\fIUID\fR/virt\-serial0 with its log virt\-serial0\-log; a
migration target adds migration.sock and migration\-disks.sock there.
.TP
\fIPRIVATE_DIR\fR/config\-map\-disks/\fIVOLUME\fR.iso, secret\-disks/, \
downwardapi\-disks/, sysprep\-disks/, \
service\-account\-disk/service\-account.iso
ISO images of config map, secret, downward API, sysprep and service account
volumes (0600).
.TP
\fIPRIVATE_DIR\fR/downwardapi\-disks/vhostmd0
A VMI's \fBdownwardMetrics\fR volume: vhostmd's metrics disk (0600), created
at the sync and rewritten in place every 5 s while the domain runs.
.TP
\fIPRIVATE_DIR\fR/downwardmetrics\-channel/downwardmetrics.sock
The \fBdownwardMetrics\fR device's virtio\-serial channel, where QEMU
listens; the launcher connects and answers the guest's metrics requests.
.TP
\fIPRIVATE_DIR\fR/libvirt/
With \fB\-\-spawn\-libvirt\fR: the spawned libvirt daemons' configuration,
sockets, logs and state, and EFI variable stores (libvirt/qemu/nvram).
.TP
\fIEPHEMERAL_DISK_DIR\fR/cloud\-init\-data, ignition\-data, disk\-data (0755)
Created at start\-up.
.TP
\fIEPHEMERAL_DISK_DIR\fR/cloud\-init\-data/\fINAMESPACE\fR/\
\fINAME\fR/noCloud.iso
.TQ
\&.../configdrive.iso
The cloud\-init ISO (0600: it holds the user data), in directories of mode
0755. Written under a temporary name and renamed into place.
.TP
\fIEPHEMERAL_DISK_DIR\fR/disk\-data/\fIVOLUME\fR/disk.qcow2
Copy\-on\-write overlays over containerDisk images (0600); kept across syncs
so the guest's writes survive.
.TP
\fIEPHEMERAL_DISK_DIR\fR/empty\-disks/\fIVOLUME\fR.qcow2
emptyDisk volumes (0600); kept across syncs.
.TP
\fICONTAINER_DISK_DIR\fR (0750), \fIHOTPLUG_DISK_DIR\fR (0755)
containerDisk base images (disk_\fIN\fR.img) and hotplugged volumes; only
read.
.TP
\fIPRIVATE_DIR\fR/libvirt (0700)
With \fB\-\-spawn\-libvirt\fR: the launcher's own daemons' directories,
which their mount namespace shows as /run/libvirt (\fBrun\fR: the daemon's
socket \fBlibvirt\-sock\fR, pid files), /etc/libvirt (\fBetc\fR: their
configuration), /var/cache/libvirt (\fBcache\fR), /var/lib/libvirt
(\fBlib\fR) and /var/log/libvirt (\fBlog\fR). QEMU's log is
\fBlog/qemu/\fINAMESPACE\fB_\fINAME\fB.log\fR as root and
\fBcache/qemu/log/\fINAMESPACE\fB_\fINAME\fB.log\fR in non\-root mode.
"#;

const LOGGING_TEXT: &str = r#".SH LOGGING
Logs go to standard error, one record per line:
.PP
.nf
.in +2
2026\-11\-30T14:22:05.123456Z INFO  [main] ready: ...
.in
.fi
.PP
the time in RFC 3339 UTC with microseconds, the level (ERROR, WARN, INFO,
DEBUG, TRACE), the thread's name in brackets, the message. The lines after
the first of a multi\-line message (a domain XML at debug level) are indented
by four spaces. Info shows start\-up, readiness, every event and the reason
for exiting; \fB\-v\fR adds debug lines; \fB\-vv\fR adds trace lines:
every request and reply line on the command socket (\fBclient N \->\fR and
\fBclient N <\-\fR) and every libvirt call with its arguments, its outcome
and its duration in milliseconds. Warnings that clients can cause again and
again (refused connections, clients closed for an unfinished line, failed
accepts) are logged at most 5 times a minute each; the next one logged says
how many were left out, and any count left at exit is logged then.
"#;

const ENVIRONMENT_TEXT: &str = r#".SH ENVIRONMENT
.TP
\fBRUST_LOG\fR
When set and not empty, it alone decides what is logged and \fB\-v\fR is
ignored: a level (\fBwarn\fR, \fBdebug\fR) or comma\-separated
\fImodule\fR=\fIlevel\fR pairs (\fBvirt_launcher::server=trace\fR), as the
env_logger crate reads them.
.TP
\fBLIBVIRT_LOG_FILTERS\fR, \fBLIBVIRT_LOG_OUTPUTS\fR
Read by the libvirt client library of the \fBvirt\fR build;
\fB\-\-libvirt\-log\-filters\fR sets the first. The \fBwire\fR build has no
client library; the flag still configures the daemons of
\fB\-\-spawn\-libvirt\fR.
.TP
\fBVIRT_LAUNCHER_LOG_VERBOSITY\fR
KubeVirt's log verbosity (a whole number, as \fB\-\-v\fR takes): 4 and 5
log as \fB\-v\fR, 6 and more as \fB\-vv\fR. Anything but a whole number
exits with status 2.
.TP
\fBNODE_NAME\fR
The host's name in the downward metrics (\fBHostName\fR), as virt\-handler
reports its node; without it, the kernel's host name.
.TP
\fBXDG_RUNTIME_DIR\fR, \fBHOME\fR
Where the \fBwire\fR build looks for a session daemon's socket
(\fB$XDG_RUNTIME_DIR/libvirt\fR, else \fB$HOME/.cache/libvirt\fR).
"#;

const EXAMPLES_TEXT: &str = r#".SH EXAMPLES
Run the demo VMI on libvirt's test driver and talk to it:
.PP
.nf
.in +2
virt\-launcher \-\-connect test:///default \-\-vmi examples/vmi.json \e
  \-\-kubevirt\-share\-dir /tmp/vl/share \-\-private\-dir /tmp/vl/private \e
  \-\-ephemeral\-disk\-dir /tmp/vl/ephemeral \e
  \-\-container\-disk\-dir /tmp/vl/cd \-\-hotplug\-disk\-dir /tmp/vl/hp &
SOCK=/tmp/vl/share/sockets/launcher\-sock
echo '{"execute":"query\-status","id":1}' | socat \- UNIX\-CONNECT:$SOCK
.in
.fi
.PP
Follow events interactively:
.PP
.nf
.in +2
socat READLINE UNIX\-CONNECT:/var/run/kubevirt/sockets/launcher\-sock
{"execute":"subscribe"}
.in
.fi
.PP
The same with the launcher's own client, then a probe and a backup's freeze:
.PP
.nf
.in +2
virt\-launcher ctl \-\-socket $SOCK query\-status
virt\-launcher ctl \-\-socket $SOCK guest\-ping timeout_seconds=3
virt\-launcher ctl \-\-socket $SOCK \-\-events DOMAIN_LIFECYCLE
virt\-launcher probe \-\-socket $SOCK \-\-timeout 2s && echo ready
virt\-launcher freeze \-\-socket $SOCK
make_backup
virt\-launcher unfreeze \-\-socket $SOCK
.in
.fi
"#;

/// The line diff the integration tests print for a regenerated file.
#[cfg(test)]
#[path = "../../tests/common/diff.rs"]
mod diff;

#[cfg(test)]
mod tests {
    use super::diff::line_diff;
    use super::*;

    /// With `UPDATE_MAN` set, a page that changed is written, its diff
    /// printed, and the test fails: a regenerated page is always a change
    /// someone reviewed and committed.
    #[test]
    fn checked_in_man_page_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/man/virt-launcher.8");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        let generated = man_page();
        if on_disk == generated {
            return;
        }
        let diff = line_diff(&on_disk, &generated);
        if std::env::var_os("UPDATE_MAN").is_some() {
            std::fs::write(path, &generated).expect("write man page");
            panic!(
                "UPDATE_MAN: man/virt-launcher.8 rewritten; review the change and commit it:\n{diff}"
            );
        }
        panic!(
            "man/virt-launcher.8 is out of date: run `cargo run -- --generate-man > man/virt-launcher.8` (or UPDATE_MAN=1 cargo test), review and commit the change:\n{diff}"
        );
    }

    #[test]
    fn the_diff_of_a_regenerated_file_shows_removed_and_added_lines() {
        assert_eq!(line_diff("a\nb\nc\n", "a\nb\nc\n"), "");
        assert_eq!(
            line_diff("a\nb\nc\n", "a\nx\nc\nd\n"),
            "-    2: b\n+    2: x\n+    4: d\n"
        );
    }

    #[test]
    fn every_flag_exit_code_command_and_event_is_in_the_man_page() {
        let page = man_page();
        for flag in FLAGS {
            assert!(page.contains(&format!("\\-\\-{}", roff(flag.long))));
        }
        for code in ExitCode::ALL {
            assert!(page.contains(&format!(".TP\n\\fB{}\\fR\n", code.code())));
        }
        for command in COMMANDS {
            assert!(page.contains(&format!("\\fB{}\\fR", roff(command.name))));
        }
        for kind in EventKind::ALL {
            assert!(page.contains(&format!("\\fB{}\\fR", roff(kind.name()))));
        }
        for sub in SUBCOMMANDS {
            assert!(page.contains(&format!(".SS {}\n", roff(sub.name))));
            assert!(page.contains(&format!(".B virt\\-launcher {}\n", roff(sub.name))));
            for flag in sub.flags {
                assert!(
                    page.contains(&format!("\\fB\\-\\-{}\\fR", roff(flag.long))),
                    "{} --{}",
                    sub.name,
                    flag.long
                );
            }
        }
    }

    #[test]
    fn every_numeric_flag_states_the_range_the_parser_enforces() {
        use crate::cli::{Args, FlagKind};
        let flat = man_page().split_whitespace().collect::<Vec<_>>().join(" ");
        let mut numeric = 0;
        for flag in FLAGS {
            // The bounds the entry must name, and a value just out of range.
            let (bounds, past): (&[&str], &[&str]) = match flag.value_name() {
                Some("DURATION") => (&["87600h"], &["87601h", "18446744073709551615"]),
                Some("SECONDS") => (&["0", "315360000"], &["315360001", "-1"]),
                Some("N") => (&["1", "65536"], &["65537", "0"]),
                Some("BYTES") => (&["64 bytes", "1024MiB"], &["63", "1025MiB"]),
                _ => continue,
            };
            numeric += 1;
            let FlagKind::Value { apply, .. } = flag.kind else {
                panic!("--{} has a value name but is a switch", flag.long);
            };
            for bound in bounds {
                assert!(flag.help.contains(bound), "--{}: {}", flag.long, flag.help);
                assert!(
                    flat.contains(&roff(bound)),
                    "--{}: {bound} not in the man page",
                    flag.long
                );
            }
            for value in past {
                let err = apply(&mut Args::defaults(), value)
                    .expect_err(&format!("--{}={value} was accepted", flag.long));
                let last = bounds.last().copied().unwrap_or_default();
                assert!(
                    err.contains(last)
                        || err.contains("more than zero")
                        || err.contains("at least 1"),
                    "--{}={value}: {err}",
                    flag.long
                );
            }
        }
        assert_eq!(numeric, 11, "the numeric flags changed: update this test");
        // The one flag with a minimum other than 0 or 1 says so.
        assert!(
            flat.contains("Longest request line accepted: at least 64 bytes, at most 1024MiB"),
            "{flat}"
        );
    }

    #[test]
    fn roff_escaping_and_filling() {
        assert_eq!(roff("--flag"), "\\-\\-flag");
        assert_eq!(roff("a\\b"), "a\\eb");
        assert_eq!(fill(".start here"), "\\&.start here\n");
        let long = "word ".repeat(40);
        let filled = fill(&long);
        assert!(filled.lines().count() > 1);
        assert!(filled.lines().all(|l| l.len() <= MAX_LINE), "{filled}");
        assert_eq!(filled.split_whitespace().count(), 40);
    }

    #[test]
    fn every_line_fits_and_no_hyphen_is_left_to_roff() {
        for (n, line) in man_page().lines().enumerate() {
            assert!(line.len() <= MAX_LINE, "line {}: {line}", n + 1);
            // A bare `-` becomes a typographic hyphen in some renderings;
            // the request lines (.TH date) are the only exception.
            if !line.starts_with(".TH") {
                let bare = line.replace("\\-", "");
                assert!(!bare.contains('-'), "line {}: bare '-' in {line}", n + 1);
            }
        }
    }
}
