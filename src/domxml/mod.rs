//! Typed model of libvirt's domain XML (<https://libvirt.org/formatdomain.html>).
//!
//! The same types are written by the converter ([`Domain::to_xml`]) and read
//! back from what libvirt returns ([`Domain::from_xml`]), including live XML:
//! elements and attributes that are not modelled (seclabels, PCI controllers'
//! details, `<resource>`, ...) are skipped on input. Writing goes through
//! our own [`write`](mod@write) (a serde serializer into a small tree, written with
//! quick-xml's mapping), reading through our own [`read`] (a small tree and
//! a deserializer with quick-xml's mapping), so attributes are fields named
//! `@name`, element text is `$text`; `serde_json` renders the same keys for
//! `query-domain`.
//!
//! Attribute values that libvirt keeps open-ended (device models, machine
//! types, ...) are strings; counts and sizes are integers.

mod devices;
mod general;
pub mod read;
pub mod write;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use devices::*;
pub use general::*;

/// libvirt's root element.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename = "domain", default)]
pub struct Domain {
    /// "kvm", "qemu" or "test".
    #[serde(rename = "@type")]
    pub domain_type: String,
    /// Present in live XML of a running domain.
    #[serde(rename = "@id", skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// `xmlns:qemu`, set with [`Domain::qemu_commandline`].
    #[serde(rename = "@xmlns:qemu", skip_serializing_if = "Option::is_none")]
    pub xmlns_qemu: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    #[serde(rename = "maxMemory", skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<MaxMemory>,
    pub memory: ScaledInteger,
    #[serde(rename = "currentMemory", skip_serializing_if = "Option::is_none")]
    pub current_memory: Option<ScaledInteger>,
    #[serde(rename = "memoryBacking", skip_serializing_if = "Option::is_none")]
    pub memory_backing: Option<MemoryBacking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<Vcpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<VcpuList>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iothreads: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cputune: Option<CpuTune>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numatune: Option<NumaTune>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysinfo: Option<SysInfo>,
    pub os: Os,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_poweroff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_reboot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_crash: Option<String>,
    pub devices: Devices,
    /// libvirt's QEMU namespace passthrough: arguments added to QEMU's
    /// command line (only for what libvirt cannot express, see
    /// `convert::network`'s passt interfaces).
    #[serde(
        rename = "qemu:commandline",
        alias = "commandline",
        skip_serializing_if = "Option::is_none"
    )]
    pub qemu_commandline: Option<QemuCommandline>,
}

/// The namespace of `<qemu:commandline>`.
pub const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// `<qemu:commandline><qemu:arg value='-netdev'/>...</qemu:commandline>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QemuCommandline {
    #[serde(rename = "qemu:arg", alias = "arg")]
    pub args: Vec<QemuArg>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QemuArg {
    #[serde(rename = "@value")]
    pub value: String,
}

impl Domain {
    /// Appends QEMU command-line arguments (and declares the namespace).
    pub fn add_qemu_args<I: IntoIterator<Item = String>>(&mut self, args: I) {
        self.xmlns_qemu = Some(QEMU_NAMESPACE.to_string());
        let commandline = self
            .qemu_commandline
            .get_or_insert_with(QemuCommandline::default);
        commandline
            .args
            .extend(args.into_iter().map(|value| QemuArg { value }));
    }
}

/// Domain XML that could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomXmlError {
    pub message: String,
}

impl fmt::Display for DomXmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DomXmlError {}

impl Domain {
    /// Whether the machine type is a q35 one, whose root bus is PCIe
    /// (`pcie.0`) rather than i440fx's `pci.0`.
    pub fn is_q35(&self) -> bool {
        self.os
            .os_type
            .machine
            .as_deref()
            .is_some_and(|m| m.contains("q35"))
    }

    /// Renders the domain as indented XML (two spaces, trailing newline), the
    /// form stored in the golden files and passed to `virDomainDefineXML`.
    pub fn to_xml(&self) -> Result<String, DomXmlError> {
        let mut xml = write::to_node(self)
            .and_then(|node| write::write_document("domain", &node, true))
            .map_err(|err| DomXmlError {
                message: format!("cannot write domain XML for {:?}: {err}", self.name),
            })?;
        xml.push('\n');
        Ok(xml)
    }

    /// One device element alone (`<disk>…</disk>`, `<interface>…`), as
    /// libvirt's attach, detach and update calls take it.
    pub fn device_xml<T: Serialize>(tag: &str, device: &T) -> Result<String, DomXmlError> {
        write::to_node(device)
            .and_then(|node| write::write_document(tag, &node, false))
            .map_err(|err| DomXmlError {
                message: format!("cannot write the <{tag}> device XML: {err}"),
            })
    }

    /// Parses domain XML as written by [`Domain::to_xml`] or returned by
    /// libvirt (`virDomainGetXMLDesc`), ignoring what is not modelled.
    pub fn from_xml(xml: &str) -> Result<Domain, DomXmlError> {
        read::from_str(xml).map_err(|err| DomXmlError {
            message: format!("invalid domain XML: {err}"),
        })
    }
}

#[cfg(test)]
mod tests;
