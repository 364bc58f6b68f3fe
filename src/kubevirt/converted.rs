//! KubeVirt's forms of the manager's cached replies, kept while those
//! replies stay the same.
//!
//! The manager answers `query-domain` and `query-stats` from its caches
//! (dropped on every change to the domain, see `manager::domain_cache` and
//! `manager::stats`), carrying the XML and the statistics encoded once. What
//! the gRPC service makes of them, the domain XML parsed as KubeVirt's
//! `api.DomainSpec` and `stats.DomainStats` as JSON, cost far more than the
//! manager's answer; made again from the same replies it would come out
//! the same. So each is kept with the encoded replies it was made from and
//! served again while the manager hands out the same ones: a reply that
//! differs in any byte (a new read, a new sample) makes it anew. It is
//! never older than the manager's caches.

use std::sync::{Arc, Mutex, MutexGuard};

use super::api;
use crate::protocol::Encoded;

/// What `stats.DomainStats` was made from, besides the launcher's fixed
/// configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsKey {
    /// `query-stats`' `stats`.
    pub bulk: Encoded,
    /// `query-domain`'s `uuid` and `xml`; `None` when it failed.
    pub uuid: String,
    pub xml: Option<Encoded>,
}

#[derive(Default)]
pub struct Converted {
    /// The live XML (as the JSON string the manager encoded) and its
    /// parsed form.
    spec: Mutex<Option<(Encoded, Arc<api::DomainSpec>)>>,
    /// The last `stats.DomainStats` JSON and what it was made from.
    stats: Mutex<Option<(StatsKey, String)>>,
}

/// A poisoned lock still holds a whole value (each is replaced at once,
/// never edited in place).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Converted {
    /// The domain XML `xml` (an encoded JSON string) as KubeVirt's
    /// `api.DomainSpec`.
    pub fn spec(&self, xml: &Encoded) -> Result<Arc<api::DomainSpec>, String> {
        if let Some((kept, spec)) = lock(&self.spec).as_ref()
            && kept == xml
        {
            return Ok(spec.clone());
        }
        let text: String = serde_json::from_str(xml.get())
            .map_err(|e| format!("the domain XML is not a JSON string: {e}"))?;
        let spec = Arc::new(api::DomainSpec::from_xml(&text).map_err(|e| {
            format!("cannot read the domain XML as KubeVirt's api.DomainSpec: {e}")
        })?);
        *lock(&self.spec) = Some((xml.clone(), spec.clone()));
        Ok(spec)
    }

    /// The statistics JSON made from `key`: the kept one if it was made
    /// from the same, else `make`'s (kept when it succeeds).
    pub fn stats(
        &self,
        key: StatsKey,
        make: impl FnOnce(&StatsKey) -> Result<String, String>,
    ) -> Result<String, String> {
        if let Some((kept, json)) = lock(&self.stats).as_ref()
            && *kept == key
        {
            return Ok(json.clone());
        }
        let json = make(&key)?;
        *lock(&self.stats) = Some((key, json.clone()));
        Ok(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const XML: &str = "<domain type='qemu'><name>ns_vm</name><vcpu>2</vcpu></domain>";

    #[test]
    fn a_spec_is_parsed_once_per_xml() {
        let converted = Converted::default();
        let xml = Encoded::new(XML);
        let first = converted.spec(&xml).unwrap();
        assert_eq!(first.name, "ns_vm");
        // The same text encoded again (a new read of an unchanged domain).
        let again = converted.spec(&Encoded::new(XML)).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let changed = XML.replace("ns_vm", "ns_other");
        let other = converted.spec(&Encoded::new(&changed)).unwrap();
        assert_eq!(other.name, "ns_other");
    }

    #[test]
    fn a_bad_xml_is_an_error_and_not_kept() {
        let converted = Converted::default();
        assert!(converted.spec(&Encoded::new("<domain")).is_err());
        assert!(converted.spec(&Encoded::new(&5)).is_err());
        assert_eq!(converted.spec(&Encoded::new(XML)).unwrap().name, "ns_vm");
    }

    #[test]
    fn stats_are_made_again_when_any_source_changes() {
        let converted = Converted::default();
        let made = Cell::new(0);
        let key = |bulk: u64, uuid: &str, xml: Option<&str>| StatsKey {
            bulk: Encoded::new(&serde_json::json!({ "cpu.time": bulk })),
            uuid: uuid.to_string(),
            xml: xml.map(Encoded::new),
        };
        let make = |key: &StatsKey| {
            made.set(made.get() + 1);
            Ok(format!("{}|{}|{:?}", key.bulk.get(), key.uuid, key.xml))
        };
        let first = converted.stats(key(1, "u", Some(XML)), make).unwrap();
        assert_eq!(
            converted.stats(key(1, "u", Some(XML)), make).unwrap(),
            first
        );
        assert_eq!(made.get(), 1);
        for changed in [
            key(2, "u", Some(XML)),
            key(2, "v", Some(XML)),
            key(2, "v", None),
        ] {
            let answer = converted.stats(changed.clone(), make).unwrap();
            assert_eq!(answer, make(&changed).unwrap());
        }
        assert_eq!(made.get(), 7);
        // A failure is not kept.
        assert!(
            converted
                .stats(key(3, "u", None), |_| Err("no".into()))
                .is_err()
        );
        assert_eq!(
            converted.stats(key(3, "u", None), make).unwrap(),
            make(&key(3, "u", None)).unwrap()
        );
    }
}
