//! The two tables of VMI fields a sync refuses that docs/vmi.md lists:
//! [`Refused`], fields that would change the guest but that this launcher
//! does not implement ("not supported by this launcher"), and [`Checked`],
//! checks made here so that the error names the VMI field instead of
//! libvirt's schema or QEMU failing at start.
//!
//! A refusal of either kind names its entry ([`ConvertError::unsupported`],
//! [`ConvertError::checked`]), so a new one cannot be written without one;
//! tests/vmi_doc.rs holds docs/vmi.md to these tables and checks that each
//! entry is refused as listed. The fields the VMI model itself refuses
//! (type `Unsupported`) are entries of [`Refused`] too: that test also
//! reads the model's source for them.
//!
//! [`ConvertError::unsupported`]: super::ConvertError::unsupported
//! [`ConvertError::checked`]: super::ConvertError::checked

/// Declares a table: an enum with one variant per entry, the JSON path of
/// the field each entry's error names, and every entry in order.
macro_rules! field_table {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $path:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every entry, in docs/vmi.md's order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The JSON path of the field the error names; `[]` stands for
            /// any index.
            pub fn path(self) -> &'static str {
                match self {
                    $($name::$variant => $path,)+
                }
            }
        }
    };
}

field_table! {
    /// A field that would change the guest but is not implemented: refused
    /// with "not supported by this launcher", never accepted and ignored.
    Refused {
        // Refused by the VMI model as it is read (`Unsupported` fields).
        UtilityVolumes => "spec.utilityVolumes",
        LaunchSecurity => "spec.domain.launchSecurity",
        Acpi => "spec.domain.firmware.acpi",
        ClientPassthrough => "spec.domain.devices.clientPassthrough",
        Sound => "spec.domain.devices.sound",
        Diag288Watchdog => "spec.domain.devices.watchdog.diag288",
        MatchVolumeBlockSize => "spec.domain.devices.disks[].blockSize.matchVolume",
        MacvtapBinding => "spec.domain.devices.interfaces[].macvtap",
        PasstCoreBinding => "spec.domain.devices.interfaces[].passt",
        NetworkResourceClaim => "spec.networks[].resourceClaim",
        // Refused by the converter, where it depends on the value or on
        // other fields.
        SupplementalPoolIoThreads => "spec.domain.ioThreadsPolicy",
        ConfigDriveDiskTag => "spec.domain.devices.disks[].tag",
        MultiqueueWithoutTap => "spec.domain.devices.networkInterfaceMultiqueue",
        NumaPassthroughWithMemoryHotplug => "spec.domain.cpu.numa.guestMappingPassthrough",
        Architecture => "spec.architecture",
    }
}

field_table! {
    /// A check made before libvirt sees the domain, so that the error names
    /// the VMI field rather than libvirt's schema or QEMU at start.
    Checked {
        DiscardGranularity => "spec.domain.devices.disks[].blockSize.custom.discardGranularity",
        TlbflushDirect => "spec.domain.features.hyperv.tlbflush.direct",
        TlbflushExtended => "spec.domain.features.hyperv.tlbflush.extended",
        ReadOnlySataDisk => "spec.domain.devices.disks[].disk.readonly",
        LunBus => "spec.domain.devices.disks[].lun.bus",
        CdromBus => "spec.domain.devices.disks[].cdrom.bus",
        ShareableCdromOrLun => "spec.domain.devices.disks[].shareable",
        SerialConsoleSocket => "spec.domain.devices.autoattachSerialConsole",
        VncSocket => "spec.domain.devices.autoattachGraphicsDevice",
        EmulatedHyperv => "spec.domain.features.hyperv",
        EmulatedHypervPassthrough => "spec.domain.features.hypervPassthrough",
        EmulatedHypervClock => "spec.domain.clock.timer.hyperv",
        EmulatedHostPassthrough => "spec.domain.cpu.model",
        PausedOnTestDriver => "spec.startStrategy",
        PersistentEfiWithoutBackendStorage => "spec.domain.firmware.bootloader.efi.persistent",
        PersistentTpmOutsideBackendStorage => "spec.domain.devices.tpm.persistent",
    }
}

/// Whether `path` (with indices) is `pattern` (with `[]`).
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let mut pattern_parts = pattern.split("[]");
    let Some(first) = pattern_parts.next() else {
        return false;
    };
    let Some(mut rest) = path.strip_prefix(first) else {
        return false;
    };
    for part in pattern_parts {
        let Some(after_open) = rest.strip_prefix('[') else {
            return false;
        };
        let digits = after_open.bytes().take_while(u8::is_ascii_digit).count();
        match after_open[digits..].strip_prefix(']') {
            Some(after) if digits > 0 => rest = after,
            _ => return false,
        }
        match rest.strip_prefix(part) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_their_pattern_with_any_index() {
        assert!(path_matches("spec.a", "spec.a"));
        assert!(path_matches("spec.d[].tag", "spec.d[12].tag"));
        assert!(!path_matches("spec.d[].tag", "spec.d[].tag"));
        assert!(!path_matches("spec.d[].tag", "spec.d[1].tags"));
        assert!(!path_matches("spec.a", "spec.ab"));
        assert!(path_matches("a[].b[]", "a[0].b[3]"));
    }

    /// A refusal worded by hand would be in no table, and so not in
    /// docs/vmi.md: only `ConvertError::unsupported` says the words.
    #[test]
    fn only_the_entries_of_refused_say_not_supported() {
        fn sources(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}"));
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    sources(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/convert");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let mut worded = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
            // The code, without the file's tests.
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let uncommented = line.split("//").next().unwrap_or_default();
                if uncommented.contains("not supported by this launcher")
                    && !file.ends_with("convert/mod.rs")
                {
                    worded.push(format!("{}:{}", file.display(), n + 1));
                }
            }
        }
        assert!(
            worded.is_empty(),
            "use ConvertError::unsupported: {worded:?}"
        );
    }

    #[test]
    fn no_field_is_in_a_table_twice() {
        let mut paths: Vec<&str> = Refused::ALL.iter().map(|r| r.path()).collect();
        paths.extend(Checked::ALL.iter().map(|c| c.path()));
        let count = paths.len();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), count);
    }
}
