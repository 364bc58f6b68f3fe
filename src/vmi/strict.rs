//! Building blocks for the strict VMI model: closed string sets with messages
//! that name the allowed values, markers for empty objects, and a type for
//! KubeVirt fields this launcher deliberately does not implement.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Declares an enum deserialized from a fixed set of strings. An unknown value
/// fails with `unknown <what> "<value>" (use a, b or c)`, so together with the
/// JSON path the user sees e.g. `spec.domain.devices.disks[1].disk.bus:
/// unknown bus "foo" (use virtio, sata, scsi or usb)`.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The spelling used in KubeVirt's API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                match text.as_str() {
                    $($text => Ok($name::$variant),)+
                    other => Err(<D::Error as serde::de::Error>::custom(format!(
                        "unknown {} {:?} (use {})",
                        $what,
                        other,
                        $crate::vmi::strict::one_of(&[$($text),+]),
                    ))),
                }
            }
        }
    };
}

pub(crate) use string_enum;

/// "a", "a or b", "a, b or c".
pub(crate) fn one_of(choices: &[&str]) -> String {
    match choices {
        [] => String::new(),
        [only] => (*only).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// An object that must be empty, like `masquerade: {}` or `rng: {}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// A KubeVirt field this launcher does not implement (GPUs, host devices, TPM,
/// SEV, virtiofs, sound, ...). Absent, `null` or an empty list is accepted
/// (generated VMIs often carry `"gpus": []`); anything else is rejected so a VM
/// never silently boots without a device its owner asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unsupported;

pub(crate) const UNSUPPORTED: &str =
    "not supported by this launcher; remove this field from the VMI";

impl<'de> serde::Deserialize<'de> for Unsupported {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnsupportedVisitor)
    }
}

struct UnsupportedVisitor;

impl<'de> Visitor<'de> for UnsupportedVisitor {
    type Value = Unsupported;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(UNSUPPORTED)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Unsupported, E> {
        Ok(Unsupported)
    }

    fn visit_none<E: de::Error>(self) -> Result<Unsupported, E> {
        Ok(Unsupported)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unsupported, A::Error> {
        match seq.next_element::<IgnoredAny>()? {
            None => Ok(Unsupported),
            Some(_) => Err(de::Error::custom(UNSUPPORTED)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Unsupported, A::Error> {
        Err(de::Error::custom(UNSUPPORTED))
    }

    fn visit_bool<E: de::Error>(self, _value: bool) -> Result<Unsupported, E> {
        Err(E::custom(UNSUPPORTED))
    }

    fn visit_str<E: de::Error>(self, _value: &str) -> Result<Unsupported, E> {
        Err(E::custom(UNSUPPORTED))
    }

    fn visit_i64<E: de::Error>(self, _value: i64) -> Result<Unsupported, E> {
        Err(E::custom(UNSUPPORTED))
    }

    fn visit_u64<E: de::Error>(self, _value: u64) -> Result<Unsupported, E> {
        Err(E::custom(UNSUPPORTED))
    }

    fn visit_f64<E: de::Error>(self, _value: f64) -> Result<Unsupported, E> {
        Err(E::custom(UNSUPPORTED))
    }
}
