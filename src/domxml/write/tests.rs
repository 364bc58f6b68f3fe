use std::fs;
use std::path::Path;

use serde::Serialize;

use super::{to_node, write_document};
use crate::domxml::read::tests::documents;
use crate::domxml::{Domain, Flag};

/// What quick-xml's serde serializer (which the writer replaces; linked
/// into tests only) writes for a whole domain, as `Domain::to_xml` did.
fn quick_xml_domain(domain: &Domain) -> String {
    let mut xml = String::new();
    let mut serializer = quick_xml::se::Serializer::new(&mut xml);
    serializer.indent(' ', 2);
    domain.serialize(serializer).unwrap();
    xml.push('\n');
    xml
}

fn quick_xml_indented<T: Serialize>(tag: &str, value: &T) -> String {
    let mut xml = String::new();
    let mut serializer = quick_xml::se::Serializer::with_root(&mut xml, Some(tag)).unwrap();
    serializer.indent(' ', 2);
    value.serialize(serializer).unwrap();
    xml
}

fn ours<T: Serialize>(tag: &str, value: &T, indent: bool) -> String {
    write_document(tag, &to_node(value).unwrap(), indent).unwrap()
}

/// Every document we have (the converter's golden files, KubeVirt's, live
/// XML), written whole and device by device, comes out byte for byte as
/// quick-xml's serializer wrote it.
#[test]
fn writes_every_document_as_quick_xml_did() {
    let mut documents = documents();
    let kubevirt = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/kubevirt");
    for entry in fs::read_dir(&kubevirt).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "xml") {
            documents.push((
                path.display().to_string(),
                fs::read_to_string(&path).unwrap(),
            ));
        }
    }
    assert!(documents.len() >= 20, "{}", documents.len());
    let mut devices = 0;
    for (path, xml) in &documents {
        let domain = Domain::from_xml(xml).unwrap_or_else(|e| panic!("{path}: {e}"));
        let written = domain.to_xml().unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(written, quick_xml_domain(&domain), "{path}");
        let d = &domain.devices;
        let mut device = |tag: &str, theirs: String, ours: String| {
            assert_eq!(ours, theirs, "{path}: <{tag}>");
            devices += 1;
        };
        macro_rules! each {
            ($tag:literal, $list:expr) => {
                for item in $list {
                    device(
                        $tag,
                        quick_xml::se::to_string_with_root($tag, item).unwrap(),
                        Domain::device_xml($tag, item).unwrap(),
                    );
                }
            };
        }
        each!("disk", &d.disks);
        each!("interface", &d.interfaces);
        each!("hostdev", &d.hostdevs);
        each!("memory", &d.memory_devices);
        each!("vsock", d.vsock.iter());
        each!("filesystem", &d.filesystems);
    }
    assert!(devices >= 40, "{devices}");
}

#[derive(Serialize)]
enum Kind {
    Plain,
}

#[derive(Serialize)]
struct Text {
    #[serde(rename = "@a")]
    a: String,
    #[serde(rename = "$text")]
    value: String,
}

#[derive(Serialize)]
struct TextThenElement {
    #[serde(rename = "$text")]
    value: u32,
    child: Flag,
    after: String,
}

#[derive(Serialize)]
struct LateAttribute {
    child: String,
    #[serde(rename = "@late")]
    late: String,
}

#[derive(Serialize)]
struct Nested {
    #[serde(rename = "@id")]
    id: u16,
    inner: Vec<Nested>,
}

#[derive(Serialize)]
struct Sample {
    #[serde(rename = "@name")]
    name: String,
    #[serde(rename = "@count")]
    count: Option<u32>,
    #[serde(rename = "@on")]
    on: bool,
    #[serde(rename = "@neg")]
    neg: i64,
    #[serde(rename = "@kind")]
    kind: Kind,
    #[serde(rename = "@xmlns:x")]
    xmlns_x: &'static str,
    title: String,
    note: Option<String>,
    unit: (),
    empty: Flag,
    words: Vec<String>,
    none: Vec<String>,
    kind_element: Kind,
    text: Text,
    empty_text: Text,
    text_then_element: TextThenElement,
    late: LateAttribute,
    nested: Nested,
    #[serde(rename = "x:tagged")]
    tagged: Option<u8>,
}

/// The mapping's corners, escaping included: every character quick-xml
/// escapes (and those it leaves) in attributes and text, empty strings,
/// absent values, text next to elements, lists, nesting.
#[test]
fn writes_the_mapping_as_quick_xml_does() {
    let special = " a&b<c>d\"e'f\rg\nh\ti ";
    let sample = Sample {
        name: special.to_string(),
        count: None,
        on: true,
        neg: -42,
        kind: Kind::Plain,
        xmlns_x: "urn:x",
        title: String::new(),
        note: None,
        unit: (),
        empty: Flag {},
        words: vec![special.to_string(), String::new(), "w".to_string()],
        none: Vec::new(),
        kind_element: Kind::Plain,
        text: Text {
            a: "1".to_string(),
            value: special.to_string(),
        },
        empty_text: Text {
            a: String::new(),
            value: String::new(),
        },
        text_then_element: TextThenElement {
            value: 7,
            child: Flag {},
            after: "x".to_string(),
        },
        late: LateAttribute {
            child: "c".to_string(),
            late: "l".to_string(),
        },
        nested: Nested {
            id: 1,
            inner: vec![
                Nested {
                    id: 2,
                    inner: vec![Nested {
                        id: 3,
                        inner: Vec::new(),
                    }],
                },
                Nested {
                    id: 4,
                    inner: Vec::new(),
                },
            ],
        },
        tagged: Some(9),
    };
    assert_eq!(ours("s", &sample, true), quick_xml_indented("s", &sample));
    assert_eq!(
        ours("s", &sample, false),
        quick_xml::se::to_string_with_root("s", &sample).unwrap()
    );
    // The escaping itself, spelled out.
    assert_eq!(
        ours("t", &sample.text, false),
        "<t a=\"1\"> a&amp;b&lt;c&gt;d\"e'f&#13;g\nh\ti </t>"
    );
    let attribute = Text {
        a: special.to_string(),
        value: String::new(),
    };
    assert_eq!(
        ours("t", &attribute, false),
        "<t a=\" a&amp;b&lt;c&gt;d&quot;e'f&#13;g&#10;h&#9;i \"/>"
    );
}

/// What has no XML form in the mapping is an error, not a panic.
#[test]
fn refuses_what_has_no_xml_form() {
    let map: std::collections::BTreeMap<String, u32> = [("a".to_string(), 1)].into();
    let err = to_node(&map).unwrap_err();
    assert_eq!(err.to_string(), "cannot write a map as domain XML");
    assert!(to_node(&1.5f64).is_err());
    let list_attribute = super::Node::Struct(vec![("@a", super::Node::List(Vec::new()))]);
    assert_eq!(
        write_document("x", &list_attribute, false)
            .unwrap_err()
            .to_string(),
        "cannot write a list as an attribute or text as domain XML"
    );
}

/// The JSON form of every document is what `serde_json::to_value` gives
/// (which `query-domain` answered with before), to the byte.
#[test]
fn json_form_is_serde_jsons() {
    for (path, xml) in documents() {
        let domain = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{path}: {e}"));
        let ours = to_node(&domain).unwrap().into_json();
        let theirs = serde_json::to_value(&domain).unwrap();
        assert_eq!(ours, theirs, "{path}");
        assert_eq!(
            serde_json::to_string(&ours).unwrap(),
            serde_json::to_string(&theirs).unwrap(),
            "{path}"
        );
    }
    let sample = Nested {
        id: 1,
        inner: vec![Nested {
            id: 2,
            inner: Vec::new(),
        }],
    };
    assert_eq!(
        to_node(&sample).unwrap().into_json(),
        serde_json::json!({"@id": 1, "inner": [{"@id": 2, "inner": []}]})
    );
    assert_eq!(
        to_node(&(None::<u8>, -3i64, Flag {}, "s"))
            .unwrap()
            .into_json(),
        serde_json::json!([null, -3, {}, "s"])
    );
}
