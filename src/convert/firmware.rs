//! `<os>` (machine, BIOS/EFI, kernel boot) and SMBIOS `<sysinfo>` (KubeVirt:
//! converter/compute/os.go and sysinfo.go).

use std::path::{Path, PathBuf};

use super::metadata::firmware_uuid;
use super::{ConvertContext, ConvertError, Refused, paths};
use crate::disks::{DiskPlan, PathKind};
use crate::domxml::{
    BootMenu, Domain, Loader, Nvram, OemStrings, Os, OsBios, OsType, Smbios, SysInfo,
    SysInfoEntries, SysInfoEntry,
};
use crate::vmi::{Chassis, Efi, Firmware, KernelBoot, VirtualMachineInstance};

const DEFAULT_MACHINE: &str = "q35";

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
    plan: &mut DiskPlan,
) -> Result<(), ConvertError> {
    let machine = vmi
        .spec
        .domain
        .machine
        .as_ref()
        .and_then(|m| m.machine_type.as_deref())
        .filter(|m| !m.is_empty())
        .unwrap_or(DEFAULT_MACHINE);
    let mut os = Os {
        os_type: OsType {
            arch: Some("x86_64".to_string()),
            machine: Some(machine.to_string()),
            value: "hvm".to_string(),
        },
        // x86 guests read their identity from the <sysinfo> below.
        smbios: Some(Smbios {
            mode: "sysinfo".to_string(),
        }),
        ..Os::default()
    };
    if let Some(firmware) = &vmi.spec.domain.firmware {
        configure_bootloader(firmware, ctx, &mut os, plan)?;
        if let Some(kernel_boot) = &firmware.kernel_boot {
            configure_kernel_boot(kernel_boot, ctx, &mut os, plan)?;
        }
    }
    // KubeVirt shows a boot menu to VMIs started paused so a user can reach it.
    if vmi.starts_paused() {
        os.bootmenu = Some(BootMenu {
            enable: "yes".to_string(),
            timeout: Some(10_000),
        });
    }
    domain.os = os;
    domain.sysinfo = Some(sysinfo(vmi, ctx)?);
    Ok(())
}

/// True when the VMI boots EFI with Secure Boot (KubeVirt's default for EFI).
pub(crate) fn uses_secure_boot(vmi: &VirtualMachineInstance) -> bool {
    efi(vmi).is_some_and(|efi| efi.secure_boot.unwrap_or(true))
}

fn efi(vmi: &VirtualMachineInstance) -> Option<&Efi> {
    vmi.spec
        .domain
        .firmware
        .as_ref()?
        .bootloader
        .as_ref()?
        .efi
        .as_ref()
}

fn configure_bootloader(
    firmware: &Firmware,
    ctx: &ConvertContext,
    os: &mut Os,
    plan: &mut DiskPlan,
) -> Result<(), ConvertError> {
    let Some(bootloader) = &firmware.bootloader else {
        return Ok(());
    };
    const PATH: &str = "spec.domain.firmware.bootloader";
    match (&bootloader.bios, &bootloader.efi) {
        (Some(_), Some(_)) => Err(ConvertError::new(PATH, "set either bios or efi, not both")),
        (Some(bios), None) => {
            if bios.use_serial == Some(true) {
                os.bios = Some(OsBios {
                    useserial: Some("yes".to_string()),
                });
            }
            Ok(())
        }
        (None, Some(efi)) => configure_efi(efi, ctx, os, plan),
        (None, None) => Ok(()),
    }
}

/// pflash loader + per-VMI NVRAM copied by libvirt from the vars template.
fn configure_efi(
    efi: &Efi,
    ctx: &ConvertContext,
    os: &mut Os,
    plan: &mut DiskPlan,
) -> Result<(), ConvertError> {
    const PATH: &str = "spec.domain.firmware.bootloader.efi";
    if efi.persistent == Some(true) {
        return Err(ConvertError::unsupported(
            Refused::PersistentEfiVariables,
            format!("{PATH}.persistent"),
            "persistent EFI variables (NVRAM lives only as long as the launcher)",
        ));
    }
    let ovmf = ctx.ovmf.as_ref().ok_or_else(|| {
        ConvertError::new(
            PATH,
            "no OVMF (EFI firmware) found on this host; install the ovmf package or boot with BIOS",
        )
    })?;
    let secure = efi.secure_boot.unwrap_or(true);
    let (code, vars) = if secure {
        match (&ovmf.secure_code, &ovmf.secure_vars) {
            (Some(code), Some(vars)) => (code, vars),
            _ => {
                return Err(ConvertError::new(
                    format!("{PATH}.secureBoot"),
                    "no Secure Boot build of OVMF found on this host; install one or set secureBoot: false",
                ));
            }
        }
    } else {
        (&ovmf.code, &ovmf.vars)
    };
    os.loader = Some(Loader {
        readonly: Some("yes".to_string()),
        secure: Some(if secure { "yes" } else { "no" }.to_string()),
        loader_type: Some("pflash".to_string()),
        path: paths::text(code),
    });
    os.nvram = Some(Nvram {
        template: Some(paths::text(vars)),
        path: paths::text(&paths::nvram_file(ctx)),
    });
    plan.require(code.clone(), PathKind::File, "EFI firmware code (OVMF)");
    plan.require(
        vars.clone(),
        PathKind::File,
        "EFI variables template (OVMF)",
    );
    plan.make_dir(paths::nvram_dir(ctx), "EFI variable store");
    Ok(())
}

/// The launcher pulls no images. KubeVirt's handler puts the kernel-boot
/// container's files at `<container-disk-dir>/kernel-boot/<base name of
/// kernelPath / initrdPath>`; that is where they are looked for first. As a
/// standalone convenience, an absolute `kernelPath` / `initrdPath` that
/// exists on the launcher's host is used when the first is absent.
fn configure_kernel_boot(
    kernel_boot: &KernelBoot,
    ctx: &ConvertContext,
    os: &mut Os,
    plan: &mut DiskPlan,
) -> Result<(), ConvertError> {
    const PATH: &str = "spec.domain.firmware.kernelBoot";
    let container = kernel_boot.container.as_ref();
    let kernel = container
        .and_then(|c| c.kernel_path.as_deref())
        .filter(|p| !p.is_empty());
    let initrd = container
        .and_then(|c| c.initrd_path.as_deref())
        .filter(|p| !p.is_empty());
    if container.is_some() && kernel.is_none() && initrd.is_none() {
        return Err(ConvertError::new(
            format!("{PATH}.container"),
            "set kernelPath (and optionally initrdPath), the files' paths in the kernel-boot container",
        ));
    }
    if kernel.is_none() && initrd.is_some() {
        return Err(ConvertError::new(
            format!("{PATH}.container.kernelPath"),
            "an initrd needs a kernel",
        ));
    }
    let args = kernel_boot.kernel_args.as_deref().filter(|a| !a.is_empty());
    if kernel.is_none() && args.is_some() {
        return Err(ConvertError::new(
            format!("{PATH}.kernelArgs"),
            "kernel arguments need kernelBoot.container.kernelPath",
        ));
    }
    if let Some(kernel) = kernel {
        let path = kernel_boot_file(ctx, kernel, &format!("{PATH}.container.kernelPath"))?;
        plan.require(path.clone(), PathKind::File, "kernel for kernelBoot");
        os.kernel = Some(paths::text(&path));
    }
    if let Some(initrd) = initrd {
        let path = kernel_boot_file(ctx, initrd, &format!("{PATH}.container.initrdPath"))?;
        plan.require(path.clone(), PathKind::File, "initrd for kernelBoot");
        os.initrd = Some(paths::text(&path));
    }
    os.cmdline = args.map(str::to_string);
    Ok(())
}

/// Where a kernel-boot file is read from: the kernel-boot container's copy
/// under the launcher's directories, else the absolute host path (both as
/// found by `detect_present_paths`); the container's copy when neither
/// exists, so the disk plan names where it should be.
fn kernel_boot_file(ctx: &ConvertContext, file: &str, path: &str) -> Result<PathBuf, ConvertError> {
    let artifact = paths::kernel_boot_artifact(ctx, file)
        .ok_or_else(|| ConvertError::new(path, format!("{file:?} does not name a file")))?;
    let host = Path::new(file);
    if !ctx.present_paths.contains(&artifact)
        && host.is_absolute()
        && ctx.present_paths.contains(host)
    {
        return Ok(host.to_path_buf());
    }
    Ok(artifact)
}

/// KubeVirt's default SMBIOS system values (virt-config
/// `SmbiosConfigDefault*`; a cluster may change them, a launcher without a
/// cluster uses these).
const SMBIOS_MANUFACTURER: &str = "KubeVirt";
const SMBIOS_FAMILY: &str = "KubeVirt";
const SMBIOS_PRODUCT: &str = "None";

/// SMBIOS: system UUID and serial, KubeVirt's manufacturer, family and
/// product, chassis, OEM strings.
fn sysinfo(vmi: &VirtualMachineInstance, ctx: &ConvertContext) -> Result<SysInfo, ConvertError> {
    let firmware = vmi.spec.domain.firmware.as_ref();
    let mut system = vec![entry("uuid", &firmware_uuid(vmi, ctx)?)];
    if let Some(serial) = firmware
        .and_then(|f| f.serial.as_deref())
        .filter(|s| !s.is_empty())
    {
        system.push(entry("serial", serial));
    }
    system.push(entry("manufacturer", SMBIOS_MANUFACTURER));
    system.push(entry("family", SMBIOS_FAMILY));
    system.push(entry("product", SMBIOS_PRODUCT));
    let oem = firmware.map(|f| f.oem_strings.clone()).unwrap_or_default();
    Ok(SysInfo {
        sysinfo_type: "smbios".to_string(),
        system: Some(SysInfoEntries { entry: system }),
        chassis: vmi.spec.domain.chassis.as_ref().map(chassis),
        oem_strings: (!oem.is_empty()).then_some(OemStrings { entry: oem }),
    })
}

fn chassis(chassis: &Chassis) -> SysInfoEntries {
    let fields = [
        ("manufacturer", &chassis.manufacturer),
        ("version", &chassis.version),
        ("serial", &chassis.serial),
        ("asset", &chassis.asset),
        ("sku", &chassis.sku),
    ];
    SysInfoEntries {
        entry: fields
            .into_iter()
            .filter_map(|(name, value)| {
                value
                    .as_deref()
                    .filter(|v| !v.is_empty())
                    .map(|v| entry(name, v))
            })
            .collect(),
    }
}

fn entry(name: &str, value: &str) -> SysInfoEntry {
    SysInfoEntry {
        name: name.to_string(),
        value: value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_err, convert_ok, convert_with};
    use crate::disks::{DiskStep, PathKind};

    #[test]
    fn bios_default_machine_and_sysinfo() {
        let domain = convert_ok(json!({"domain": {"firmware": {"serial": "SN-1"}}})).domain;
        assert_eq!(domain.os.os_type.machine.as_deref(), Some("q35"));
        assert!(domain.os.loader.is_none());
        let system = domain
            .sysinfo
            .and_then(|s| s.system)
            .unwrap_or_default()
            .entry;
        assert_eq!(system[0].name, "uuid");
        assert_eq!(Some(system[0].value.as_str()), domain.uuid.as_deref());
        assert_eq!(
            (system[1].name.as_str(), system[1].value.as_str()),
            ("serial", "SN-1")
        );
        let pc = convert_ok(json!({"domain": {"machine": {"type": "pc-i440fx-7.2"}}})).domain;
        assert_eq!(pc.os.os_type.machine.as_deref(), Some("pc-i440fx-7.2"));
    }

    #[test]
    fn efi_secure_boot_by_default() {
        let conversion = convert_ok(json!({"domain": {"firmware": {"bootloader": {"efi": {}}}}}));
        let loader = conversion.domain.os.loader.unwrap_or_default();
        assert_eq!(loader.path, "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd");
        assert_eq!(loader.secure.as_deref(), Some("yes"));
        let nvram = conversion.domain.os.nvram.unwrap_or_default();
        assert_eq!(
            nvram.path,
            "/var/run/kubevirt-private/libvirt/qemu/nvram/testvmi_VARS.fd"
        );
        assert_eq!(
            nvram.template.as_deref(),
            Some("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd".into(),
                    kind: PathKind::File,
                    what: "EFI firmware code (OVMF)".into(),
                })
        );
        let plain = convert_ok(
            json!({"domain": {"firmware": {"bootloader": {"efi": {"secureBoot": false}}}}}),
        );
        assert_eq!(
            plain.domain.os.loader.map(|l| l.path).as_deref(),
            Some("/usr/share/OVMF/OVMF_CODE_4M.fd")
        );
    }

    #[test]
    fn efi_without_ovmf_is_a_clear_error() {
        let mut ctx = context();
        ctx.ovmf = None;
        let err = convert_with(
            json!({"domain": {"firmware": {"bootloader": {"efi": {}}}}}),
            &ctx,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(
            err,
            "spec.domain.firmware.bootloader.efi: no OVMF (EFI firmware) found on this host; install the ovmf package or boot with BIOS"
        );
    }

    #[test]
    fn kernel_boot_files_come_from_the_kernel_boot_container() {
        let spec = json!({"domain": {"firmware": {"kernelBoot": {"kernelArgs": "console=ttyS0",
            "container": {"image": "x", "kernelPath": "/boot/vmlinuz", "initrdPath": "initrd.img"}}}}});
        // KubeVirt's layout: <container-disk-dir>/kernel-boot/<base name>.
        let conversion = convert_ok(spec.clone());
        assert_eq!(
            conversion.domain.os.kernel.as_deref(),
            Some("/var/run/kubevirt/container-disks/kernel-boot/vmlinuz")
        );
        assert_eq!(
            conversion.domain.os.initrd.as_deref(),
            Some("/var/run/kubevirt/container-disks/kernel-boot/initrd.img")
        );
        assert_eq!(
            conversion.domain.os.cmdline.as_deref(),
            Some("console=ttyS0")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/var/run/kubevirt/container-disks/kernel-boot/vmlinuz".into(),
                    kind: PathKind::File,
                    what: "kernel for kernelBoot".into(),
                })
        );
        // The standalone convenience: an absolute host path that exists,
        // when the container's copy does not.
        let mut ctx = context();
        ctx.present_paths.insert("/boot/vmlinuz".into());
        let host = convert_with(spec.clone(), &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(host.domain.os.kernel.as_deref(), Some("/boot/vmlinuz"));
        ctx.present_paths
            .insert("/var/run/kubevirt/container-disks/kernel-boot/vmlinuz".into());
        let both = convert_with(spec, &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            both.domain.os.kernel.as_deref(),
            Some("/var/run/kubevirt/container-disks/kernel-boot/vmlinuz")
        );
        let args_only =
            convert_err(json!({"domain": {"firmware": {"kernelBoot": {"kernelArgs": "quiet"}}}}));
        assert_eq!(
            args_only,
            "spec.domain.firmware.kernelBoot.kernelArgs: kernel arguments need kernelBoot.container.kernelPath"
        );
    }

    #[test]
    fn smbios_carries_kubevirts_system_values() {
        let system = convert_ok(json!({}))
            .domain
            .sysinfo
            .and_then(|s| s.system)
            .unwrap_or_default()
            .entry;
        let pairs: Vec<(&str, &str)> = system
            .iter()
            .skip(1)
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("manufacturer", "KubeVirt"),
                ("family", "KubeVirt"),
                ("product", "None")
            ]
        );
    }

    #[test]
    fn paused_start_shows_the_boot_menu() {
        let domain = convert_ok(json!({"startStrategy": "Paused"})).domain;
        assert_eq!(domain.os.bootmenu.map(|b| b.timeout), Some(Some(10_000)));
    }
}
