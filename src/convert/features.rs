//! `<features>` and `<clock>` (KubeVirt: converter/compute/hypervisor_features.go
//! and clock.go).

use super::firmware::uses_secure_boot;
use super::{Checked, ConvertContext, ConvertError, DomainType, require_libvirt};
use crate::domxml::{
    self, Apic, Clock, Domain, Flag, HyperV, KvmFeatures, Smm, Spinlocks, State, Stimer, TlbFlush,
    VendorId,
};
use crate::vmi::{FeatureHyperv, FeatureState, Features, VirtualMachineInstance};

/// libvirt's lower bound for Hyper-V spinlock retries.
const MIN_SPINLOCK_RETRIES: u32 = 4096;

/// `clock.utc.offsetSeconds` moves the guest's clock at most a hundred
/// years (36525 days) either way: libvirt adds it to the host's time as a C
/// `time_t` without a check, and the guest's RTC starts at that date.
const MAX_CLOCK_OFFSET_SECONDS: i64 = 36_525 * 24 * 3600;

/// libvirt 11.0.0 added `<tlbflush><direct/><extended/></tlbflush>`.
pub(crate) const TLBFLUSH_CHILDREN_SINCE: (u32, u32, u32) = (11, 0, 0);

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let empty = Features::default();
    let spec = vmi.spec.domain.features.as_ref().unwrap_or(&empty);
    let enabled = |state: &Option<FeatureState>| state.as_ref().map(FeatureState::is_enabled);
    let mut features = domxml::Features {
        // ACPI is on unless disabled: the guest needs it for ACPI shutdown.
        acpi: enabled(&spec.acpi).unwrap_or(true).then_some(Flag {}),
        // QEMU's VMware I/O port is of no use to KubeVirt guests.
        vmport: Some(State::on_off(false)),
        ..domxml::Features::default()
    };
    if let Some(apic) = &spec.apic
        && apic.enabled.unwrap_or(true)
    {
        features.apic = Some(Apic {
            eoi: apic.end_of_interrupt.then(|| "on".to_string()),
        });
    }
    features.smm = smm(vmi, spec)?;
    features.hyperv = hyperv(spec)?;
    if features.hyperv.is_some() && ctx.domain_type == DomainType::Qemu {
        let given = if spec.hyperv.is_some() {
            Checked::EmulatedHyperv
        } else {
            Checked::EmulatedHypervPassthrough
        };
        return Err(ConvertError::checked(
            given,
            given.path(),
            "Hyper-V enlightenments need KVM, but this launcher emulates the VM (domain type qemu); remove them to run it emulated",
        ));
    }
    if let Some(flush) = spec.hyperv.as_ref().and_then(|h| h.tlbflush.as_ref()) {
        for (name, checked, child) in [
            ("direct", Checked::TlbflushDirect, &flush.direct),
            ("extended", Checked::TlbflushExtended, &flush.extended),
        ] {
            if child.is_some() {
                require_libvirt(
                    ctx,
                    TLBFLUSH_CHILDREN_SINCE,
                    (checked, checked.path()),
                    &format!("hyperv tlbflush {name}"),
                )?;
            }
        }
    }
    if let Some(kvm) = &spec.kvm {
        features.kvm = Some(KvmFeatures {
            hidden: Some(State::on_off(kvm.hidden)),
            hint_dedicated: None,
        });
    }
    features.pvspinlock = spec
        .pvspinlock
        .as_ref()
        .map(|p| State::on_off(p.is_enabled()));
    domain.features = Some(features);
    Ok(())
}

/// Secure Boot firmware only works with System Management Mode on.
fn smm(vmi: &VirtualMachineInstance, spec: &Features) -> Result<Option<Smm>, ConvertError> {
    let requested = spec.smm.as_ref().map(FeatureState::is_enabled);
    let secure_boot = uses_secure_boot(vmi);
    match (requested, secure_boot) {
        (Some(false), true) => Err(ConvertError::new(
            "spec.domain.features.smm.enabled",
            "EFI Secure Boot needs SMM; enable it or set secureBoot: false",
        )),
        (Some(true), _) | (None, true) => Ok(Some(Smm {
            state: Some("on".to_string()),
        })),
        _ => Ok(None),
    }
}

fn hyperv(spec: &Features) -> Result<Option<HyperV>, ConvertError> {
    let passthrough = spec
        .hyperv_passthrough
        .as_ref()
        .is_some_and(FeatureState::is_enabled);
    match (&spec.hyperv, passthrough) {
        (Some(_), true) => Err(ConvertError::new(
            "spec.domain.features.hypervPassthrough",
            "hypervPassthrough enables all Hyper-V features; remove spec.domain.features.hyperv",
        )),
        (None, true) => Ok(Some(HyperV {
            mode: Some("passthrough".to_string()),
            ..HyperV::default()
        })),
        (Some(hyperv), false) => custom_hyperv(hyperv).map(Some),
        (None, false) => Ok(None),
    }
}

fn custom_hyperv(spec: &FeatureHyperv) -> Result<HyperV, ConvertError> {
    let state =
        |feature: &Option<FeatureState>| feature.as_ref().map(|f| State::on_off(f.is_enabled()));
    let on_off =
        |enabled: Option<bool>| if enabled.unwrap_or(true) { "on" } else { "off" }.to_string();
    let spinlocks = match &spec.spinlocks {
        Some(spinlocks) => {
            if let Some(retries) = spinlocks.spinlocks
                && retries < MIN_SPINLOCK_RETRIES
            {
                return Err(ConvertError::new(
                    "spec.domain.features.hyperv.spinlocks.spinlocks",
                    format!("{retries} retries is below the minimum of {MIN_SPINLOCK_RETRIES}"),
                ));
            }
            Some(Spinlocks {
                state: on_off(spinlocks.enabled),
                retries: spinlocks.spinlocks,
            })
        }
        None => None,
    };
    let vendor_id = match &spec.vendorid {
        Some(vendor) => {
            let value = vendor.vendorid.clone();
            if value.as_ref().is_some_and(|v| v.is_empty() || v.len() > 12) {
                return Err(ConvertError::new(
                    "spec.domain.features.hyperv.vendorid.vendorid",
                    "the vendor id must be 1 to 12 characters",
                ));
            }
            Some(VendorId {
                state: on_off(vendor.enabled),
                value,
            })
        }
        None => None,
    };
    Ok(HyperV {
        mode: Some("custom".to_string()),
        relaxed: state(&spec.relaxed),
        vapic: state(&spec.vapic),
        spinlocks,
        vpindex: state(&spec.vpindex),
        runtime: state(&spec.runtime),
        synic: state(&spec.synic),
        stimer: spec.synictimer.as_ref().map(|timer| Stimer {
            state: on_off(timer.enabled),
            direct: state(&timer.direct),
        }),
        reset: state(&spec.reset),
        vendor_id,
        frequencies: state(&spec.frequencies),
        reenlightenment: state(&spec.reenlightenment),
        tlbflush: spec.tlbflush.as_ref().map(|flush| TlbFlush {
            state: on_off(flush.enabled),
            direct: state(&flush.direct),
            extended: state(&flush.extended),
        }),
        ipi: state(&spec.ipi),
        evmcs: state(&spec.evmcs),
    })
}

/// `utc` (with an offset, or reset on boot) or `timezone`, plus timers.
pub(crate) fn configure_clock(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let Some(spec) = &vmi.spec.domain.clock else {
        return Ok(());
    };
    let mut clock = match (&spec.utc, &spec.timezone) {
        (Some(_), Some(_)) => {
            return Err(ConvertError::new(
                "spec.domain.clock",
                "set either utc or timezone, not both",
            ));
        }
        (Some(utc), None) => Clock {
            offset: "utc".to_string(),
            adjustment: Some(match utc.offset_seconds {
                None => "reset".to_string(),
                Some(s) if (-MAX_CLOCK_OFFSET_SECONDS..=MAX_CLOCK_OFFSET_SECONDS).contains(&s) => {
                    s.to_string()
                }
                Some(s) => {
                    return Err(ConvertError::new(
                        "spec.domain.clock.utc.offsetSeconds",
                        format!(
                            "{s} is out of range (-{MAX_CLOCK_OFFSET_SECONDS} to {MAX_CLOCK_OFFSET_SECONDS}, a hundred years either way)"
                        ),
                    ));
                }
            }),
            ..Clock::default()
        },
        (None, Some(zone)) => Clock {
            offset: "timezone".to_string(),
            timezone: Some(zone.clone()),
            ..Clock::default()
        },
        (None, None) => Clock {
            offset: "utc".to_string(),
            ..Clock::default()
        },
    };
    if let Some(timer) = &spec.timer {
        let present =
            |p: Option<bool>| Some(if p.unwrap_or(true) { "yes" } else { "no" }.to_string());
        let mut add =
            |name: &str, tickpolicy: Option<&str>, track: Option<&str>, on: Option<bool>| {
                clock.timer.push(domxml::Timer {
                    name: name.to_string(),
                    tickpolicy: tickpolicy.map(str::to_string),
                    track: track.map(str::to_string),
                    present: present(on),
                    frequency: None,
                });
            };
        if let Some(rtc) = &timer.rtc {
            add(
                "rtc",
                rtc.tick_policy.map(|t| t.as_str()),
                rtc.track.map(|t| t.as_str()),
                rtc.present,
            );
        }
        if let Some(pit) = &timer.pit {
            add(
                "pit",
                pit.tick_policy.map(|t| t.as_str()),
                None,
                pit.present,
            );
        }
        if let Some(kvm) = &timer.kvm {
            add("kvmclock", None, None, kvm.present);
        }
        if let Some(hpet) = &timer.hpet {
            add(
                "hpet",
                hpet.tick_policy.map(|t| t.as_str()),
                None,
                hpet.present,
            );
        }
        if timer.hyperv.is_some() && ctx.domain_type == DomainType::Qemu {
            return Err(ConvertError::checked(
                Checked::EmulatedHypervClock,
                "spec.domain.clock.timer.hyperv",
                "the Hyper-V clock needs KVM, but this launcher emulates the VM (domain type qemu); remove it to run the VM emulated",
            ));
        }
        if let Some(hyperv) = &timer.hyperv {
            add("hypervclock", None, None, hyperv.present);
        }
    }
    domain.clock = Some(clock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{convert_err, convert_ok};

    /// Hyper-V needs KVM: these tests convert for it.
    fn kvm() -> super::super::ConvertContext {
        let mut ctx = super::super::test_support::context();
        ctx.domain_type = super::super::DomainType::Kvm;
        ctx
    }

    #[test]
    fn acpi_on_by_default_and_can_be_disabled() {
        let features = convert_ok(json!({})).domain.features.unwrap_or_default();
        assert!(features.acpi.is_some());
        assert_eq!(features.vmport.map(|v| v.state).as_deref(), Some("off"));
        assert!(features.smm.is_none());
        let off = convert_ok(json!({"domain": {"features": {"acpi": {"enabled": false}}}})).domain;
        assert!(off.features.unwrap_or_default().acpi.is_none());
    }

    #[test]
    fn hyperv_and_friends() {
        let spec = json!({"domain": {"features": {
            "apic": {"endOfInterrupt": true}, "smm": {}, "kvm": {"hidden": true}, "pvspinlock": {"enabled": false},
            "hyperv": {"relaxed": {}, "vapic": {"enabled": true}, "spinlocks": {"spinlocks": 8191},
                       "synictimer": {"direct": {}}, "vendorid": {"vendorid": "KVMKVMKVM"}, "tlbflush": {}}}}});
        let emulated = convert_err(spec.clone());
        assert_eq!(
            emulated,
            "spec.domain.features.hyperv: Hyper-V enlightenments need KVM, but this launcher emulates the VM (domain type qemu); remove them to run it emulated"
        );
        let features = super::super::test_support::convert_with(spec, &kvm())
            .unwrap_or_else(|e| panic!("{e}"))
            .domain
            .features
            .unwrap_or_default();
        assert_eq!(features.apic.and_then(|a| a.eoi).as_deref(), Some("on"));
        assert_eq!(features.smm.and_then(|s| s.state).as_deref(), Some("on"));
        assert_eq!(
            features
                .kvm
                .and_then(|k| k.hidden)
                .map(|h| h.state)
                .as_deref(),
            Some("on")
        );
        assert_eq!(features.pvspinlock.map(|p| p.state).as_deref(), Some("off"));
        let hyperv = features.hyperv.unwrap_or_default();
        assert_eq!(hyperv.mode.as_deref(), Some("custom"));
        assert_eq!(hyperv.relaxed.map(|r| r.state).as_deref(), Some("on"));
        assert_eq!(hyperv.spinlocks.and_then(|s| s.retries), Some(8191));
        assert_eq!(
            hyperv
                .stimer
                .and_then(|s| s.direct)
                .map(|d| d.state)
                .as_deref(),
            Some("on")
        );
        assert_eq!(
            hyperv.vendor_id.and_then(|v| v.value).as_deref(),
            Some("KVMKVMKVM")
        );
        // KubeVirt's dependencies: synictimer turns synic on, synic vpindex.
        assert_eq!(hyperv.synic.map(|s| s.state).as_deref(), Some("on"));
        assert_eq!(hyperv.vpindex.map(|s| s.state).as_deref(), Some("on"));
    }

    #[test]
    fn secure_boot_turns_smm_on_and_refuses_it_off() {
        let efi = json!({"domain": {"firmware": {"bootloader": {"efi": {"secureBoot": true}}}}});
        assert!(
            convert_ok(efi)
                .domain
                .features
                .and_then(|f| f.smm)
                .is_some()
        );
        let message = convert_err(json!({"domain": {"firmware": {"bootloader": {"efi": {}}},
            "features": {"smm": {"enabled": false}}}}));
        assert!(
            message.starts_with("spec.domain.features.smm.enabled: EFI Secure Boot needs SMM"),
            "{message}"
        );
    }

    #[test]
    fn spinlock_minimum() {
        let message = convert_err(
            json!({"domain": {"features": {"hyperv": {"spinlocks": {"spinlocks": 100}}}}}),
        );
        assert_eq!(
            message,
            "spec.domain.features.hyperv.spinlocks.spinlocks: 100 retries is below the minimum of 4096"
        );
    }

    #[test]
    fn clock_offsets_and_timers() {
        let utc = convert_ok(json!({"domain": {"clock": {"utc": {}, "timer": {"rtc": {"tickPolicy": "catchup"}, "hpet": {"present": false}}}}}))
            .domain
            .clock
            .unwrap_or_default();
        assert_eq!(
            (utc.offset.as_str(), utc.adjustment.as_deref()),
            ("utc", Some("reset"))
        );
        assert_eq!(utc.timer[0].tickpolicy.as_deref(), Some("catchup"));
        assert_eq!(
            (utc.timer[1].name.as_str(), utc.timer[1].present.as_deref()),
            ("hpet", Some("no"))
        );
        let tz = convert_ok(json!({"domain": {"clock": {"timezone": "Europe/Paris"}}}))
            .domain
            .clock
            .unwrap_or_default();
        assert_eq!(
            (tz.offset.as_str(), tz.timezone.as_deref()),
            ("timezone", Some("Europe/Paris"))
        );
        let offset = convert_ok(json!({"domain": {"clock": {"utc": {"offsetSeconds": -3600}}}}))
            .domain
            .clock;
        assert_eq!(offset.and_then(|c| c.adjustment).as_deref(), Some("-3600"));
        assert!(convert_ok(json!({})).domain.clock.is_none());
        // A hundred years either way; beyond, the field is named.
        for ok in [-3_155_760_000i64, 3_155_760_000] {
            let clock = convert_ok(json!({"domain": {"clock": {"utc": {"offsetSeconds": ok}}}}))
                .domain
                .clock;
            assert_eq!(clock.and_then(|c| c.adjustment), Some(ok.to_string()));
        }
        for bad in [-3_155_760_001i64, 3_155_760_001, i64::MAX, i64::MIN] {
            assert_eq!(
                convert_err(json!({"domain": {"clock": {"utc": {"offsetSeconds": bad}}}})),
                format!(
                    "spec.domain.clock.utc.offsetSeconds: {bad} is out of range (-3155760000 to 3155760000, a hundred years either way)"
                )
            );
        }
        let both = convert_err(json!({"domain": {"clock": {"utc": {}, "timezone": "UTC"}}}));
        assert_eq!(
            both,
            "spec.domain.clock: set either utc or timezone, not both"
        );
    }

    #[test]
    fn tlbflush_children_need_libvirt_11() {
        let spec = json!({"domain": {"features": {"hyperv": {"vpindex": {}, "tlbflush": {"direct": {}}}}}});
        let mut ctx = kvm();
        ctx.libvirt_version = Some(super::super::libvirt_version(9, 0, 0));
        let err = super::super::test_support::convert_with(spec.clone(), &ctx)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "spec.domain.features.hyperv.tlbflush.direct: hyperv tlbflush direct needs libvirt 11.0.0 or newer; this launcher's libvirt is 9.0.0"
            )
        );
        ctx.libvirt_version = Some(super::super::libvirt_version(11, 0, 0));
        super::super::test_support::convert_with(spec, &ctx).unwrap_or_else(|e| panic!("{e}"));
        // Plain tlbflush is older than libvirt 9.0.
        ctx.libvirt_version = Some(super::super::libvirt_version(9, 0, 0));
        super::super::test_support::convert_with(
            json!({"domain": {"features": {"hyperv": {"tlbflush": {}}}}}),
            &ctx,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}
