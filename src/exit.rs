//! Process exit codes. This table is the single source for the man page's
//! EXIT STATUS section, so scripts can rely on every number here.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// The domain stopped because it was asked to: the guest powered off
    /// (by itself, by `shutdown`, or on SIGTERM within the grace period),
    /// `kill` was used, the domain migrated away, or a signal arrived before
    /// any domain existed.
    Ok,
    /// An internal error: a thread panicked or an unexpected failure.
    Internal,
    /// Bad command line: unknown flag, bad value, unreadable --vmi file.
    Usage,
    /// A directory, a lock file or the command socket could not be set up,
    /// another launcher holds a lock of one of this launcher's directories,
    /// or the hook sidecars did not all answer at start-up.
    Setup,
    /// libvirt could not be reached within 15 seconds at start-up, or the
    /// launcher's own libvirt daemon could not be started.
    LibvirtUnavailable,
    /// No domain was defined and started within --qemu-timeout.
    QemuTimeout,
    /// The domain stopped without being asked: the guest crashed, QEMU died
    /// or was killed, or something outside the launcher destroyed it.
    DomainCrashed,
    /// The guest did not shut down within the grace period after SIGTERM and
    /// was forced off.
    GracePeriodExpired,
    /// --vmi was given and syncing that VMI at start-up failed.
    StandaloneSyncFailed,
    /// This launcher was a migration target and the incoming migration
    /// failed or was cancelled; the guest still runs on the source.
    MigrationAborted,
}

impl ExitCode {
    pub const ALL: [ExitCode; 10] = [
        ExitCode::Ok,
        ExitCode::Internal,
        ExitCode::Usage,
        ExitCode::Setup,
        ExitCode::LibvirtUnavailable,
        ExitCode::QemuTimeout,
        ExitCode::DomainCrashed,
        ExitCode::GracePeriodExpired,
        ExitCode::StandaloneSyncFailed,
        ExitCode::MigrationAborted,
    ];

    pub fn code(self) -> i32 {
        match self {
            ExitCode::Ok => 0,
            ExitCode::Internal => 1,
            ExitCode::Usage => 2,
            ExitCode::Setup => 3,
            ExitCode::LibvirtUnavailable => 4,
            ExitCode::QemuTimeout => 5,
            ExitCode::DomainCrashed => 6,
            ExitCode::GracePeriodExpired => 7,
            ExitCode::StandaloneSyncFailed => 8,
            ExitCode::MigrationAborted => 9,
        }
    }

    /// One plain-text sentence for the man page and logs.
    pub fn meaning(self) -> &'static str {
        match self {
            ExitCode::Ok => {
                "The domain stopped because it was asked to: the guest powered off (by itself, after shutdown, or after SIGTERM within the grace period), kill was used, the domain migrated away, or a signal arrived before any domain existed."
            }
            ExitCode::Internal => {
                "Internal error: a thread panicked or an unexpected failure occurred; the log says which."
            }
            ExitCode::Usage => {
                "Bad command line: an unknown flag, a bad value, or an unreadable --vmi file."
            }
            ExitCode::Setup => {
                "A directory, a lock file or the command socket could not be set up (the message names the path), another launcher holds the lock of one of this launcher's directories (socket, private or ephemeral; see FILES), or fewer than --hook-sidecars hook sidecars answered within --qemu-timeout (or one answered with no version this launcher speaks)."
            }
            ExitCode::LibvirtUnavailable => {
                "libvirt could not be reached within 15 seconds at start-up, or the launcher's own libvirt daemons (--spawn-libvirt) could not be started."
            }
            ExitCode::QemuTimeout => "No domain was defined and started within --qemu-timeout.",
            ExitCode::DomainCrashed => {
                "The domain stopped without being asked: the guest crashed, QEMU died or was killed, or something outside the launcher destroyed it."
            }
            ExitCode::GracePeriodExpired => {
                "After SIGTERM (or SIGINT, SIGHUP, SIGQUIT) the guest did not power off within the grace period and was forced off."
            }
            ExitCode::StandaloneSyncFailed => {
                "--vmi was given and syncing that VMI at start-up failed."
            }
            ExitCode::MigrationAborted => {
                "This launcher was a migration target and the incoming migration failed or was cancelled; the guest still runs on the source."
            }
        }
    }
}
