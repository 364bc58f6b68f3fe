//! The few values whose libvirt XML and KubeVirt JSON differ in shape, not
//! only in names. Every type of the spec reads both: KubeVirt's JSON names
//! (what it writes) and, as serde aliases, the XML names the domain XML
//! reader (`crate::domxml::read`) gives them (`@attribute`, `$text`, child
//! elements by name), the way Go's `encoding/xml` fills the same structs.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The prefix KubeVirt gives the aliases it chooses (`ua-data`); its JSON
/// drops it and says `UserDefined` instead.
pub const USER_ALIAS_PREFIX: &str = "ua-";

/// Go's `xml.Name`, which `encoding/json` writes as a struct. Go's XML
/// decoder fills it with the element's name; the domain XML has no
/// namespace on its elements, so `Space` stays empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct XmlName {
    #[serde(rename = "Space")]
    pub space: String,
    #[serde(rename = "Local")]
    pub local: String,
}

impl XmlName {
    pub fn local(name: &str) -> XmlName {
        XmlName {
            space: String::new(),
            local: name.to_string(),
        }
    }
}

/// A device alias: `<alias name='ua-data'/>` in XML, `{"Name": "data",
/// "UserDefined": true}` in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Alias {
    pub name: String,
    pub user_defined: bool,
}

impl Alias {
    /// From the XML's name: KubeVirt's prefix marks one it chose.
    pub fn from_xml_name(name: &str) -> Alias {
        match name.strip_prefix(USER_ALIAS_PREFIX) {
            Some(rest) => Alias {
                name: rest.to_string(),
                user_defined: true,
            },
            None => Alias {
                name: name.to_string(),
                user_defined: false,
            },
        }
    }
}

impl Serialize for Alias {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            #[serde(rename = "Name")]
            name: &'a str,
            #[serde(rename = "UserDefined")]
            user_defined: bool,
        }
        Json {
            name: &self.name,
            user_defined: self.user_defined,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Alias {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Alias, D::Error> {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Either {
            #[serde(rename = "Name")]
            name: String,
            #[serde(rename = "UserDefined")]
            user_defined: bool,
            #[serde(rename = "@name")]
            xml_name: Option<String>,
        }
        let either = Either::deserialize(deserializer)?;
        Ok(match either.xml_name {
            Some(name) => Alias::from_xml_name(&name),
            None => Alias {
                name: either.name,
                user_defined: either.user_defined,
            },
        })
    }
}

/// `<sysinfo>`'s `<system><entry .../></system>` lists, which Go's
/// `xml:"system>entry"` flattens into one list: read from a JSON list (or
/// null) or from the XML wrapper element.
pub fn entries<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct EntriesVisitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<T> {
        type Value = Option<Vec<T>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of entries, or an element holding <entry> elements")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(Some(items))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut items: Vec<T> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "entry" {
                    items.extend(map.next_value::<Vec<T>>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            // Go leaves the list nil when the wrapper holds no entry.
            Ok((!items.is_empty()).then_some(items))
        }
    }

    deserializer.deserialize_option(EntriesVisitor(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_read_from_either_form_and_write_kubevirts() {
        let from_xml: Alias = crate::domxml::read::from_str("<alias name='ua-data'/>").unwrap();
        assert_eq!(
            from_xml,
            Alias {
                name: "data".into(),
                user_defined: true
            }
        );
        let libvirts: Alias = crate::domxml::read::from_str("<alias name='pci.1'/>").unwrap();
        assert_eq!(libvirts, Alias::from_xml_name("pci.1"));
        assert!(!libvirts.user_defined);
        let json = serde_json::to_string(&from_xml).unwrap();
        assert_eq!(json, r#"{"Name":"data","UserDefined":true}"#);
        let back: Alias = serde_json::from_str(&json).unwrap();
        assert_eq!(back, from_xml);
    }
}
