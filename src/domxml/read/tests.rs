use std::fs;
use std::path::Path;

use serde::Deserialize;

use super::{MAX_DEPTH, from_str};
use crate::domxml::{Disk, Domain, QemuCommandline};

#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
struct Sample {
    #[serde(rename = "@name")]
    name: String,
    #[serde(rename = "@count")]
    count: Option<u32>,
    #[serde(rename = "@label")]
    label: Option<String>,
    #[serde(rename = "@xmlns:x")]
    xmlns_x: Option<String>,
    #[serde(rename = "$text")]
    text: String,
    title: Option<String>,
    flag: Option<Flagged>,
    #[serde(rename = "item")]
    items: Vec<Item>,
    #[serde(rename = "x:tagged", alias = "tagged")]
    tagged: Option<Item>,
    on: Option<bool>,
    size: Option<i64>,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
struct Item {
    #[serde(rename = "@id")]
    id: u32,
    #[serde(rename = "$text")]
    value: String,
}

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Flagged {}

fn sample(xml: &str) -> Sample {
    from_str(xml).unwrap_or_else(|e| panic!("{e}\n{xml}"))
}

#[test]
fn attributes_text_and_children_fill_their_fields() {
    let got = sample(
        "<?xml version='1.0'?>\n<!-- a comment -->\n<s name='a' count=' 3 ' other='x'>\
         <title>T</title>  body  <flag/><on>true</on><size>-5</size></s>",
    );
    assert_eq!(got.name, "a");
    assert_eq!(got.count, Some(3));
    assert_eq!(got.title.as_deref(), Some("T"));
    assert_eq!(got.text, "  body  ");
    assert_eq!(got.flag, Some(Flagged {}));
    assert_eq!(got.on, Some(true));
    assert_eq!(got.size, Some(-5));
}

#[test]
fn absent_and_empty_values_follow_quick_xml() {
    // Present is Some, even empty; absent is None.
    let got = sample("<s label=''><title/></s>");
    assert_eq!(got.label.as_deref(), Some(""));
    assert_eq!(got.title.as_deref(), Some(""));
    assert_eq!(got.count, None);
    assert!(from_str::<Sample>("<s count=''/>").is_err());
    let got = sample("<s/>");
    assert_eq!(got, Sample::default());
    // Indentation is not text, but an element's own blank text is kept.
    let got = sample("<s>\n  <title> </title>\n</s>");
    assert_eq!(got.text, "");
    assert_eq!(got.title.as_deref(), Some(" "));
}

#[test]
fn a_list_gathers_its_elements_from_among_other_ones() {
    let got = sample(
        "<s><item id='1'>a</item><title>t</title><unknown><item id='9'/></unknown>\
         <item id='2'>b</item><flag/><item id='3'/></s>",
    );
    let ids: Vec<u32> = got.items.iter().map(|i| i.id).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(got.items[1].value, "b");
    assert_eq!(got.title.as_deref(), Some("t"));
}

#[test]
fn a_single_field_takes_the_first_of_repeated_elements() {
    let got = sample("<s><title>one</title><title>two</title></s>");
    assert_eq!(got.title.as_deref(), Some("one"));
}

#[test]
fn prefixed_names_match_by_local_name_and_declarations_keep_theirs() {
    let got = sample("<s xmlns:x='urn:x' x:name='n'><x:tagged id='4'/></s>");
    assert_eq!(got.xmlns_x.as_deref(), Some("urn:x"));
    assert_eq!(got.name, "n");
    assert_eq!(got.tagged.map(|t| t.id), Some(4));
    for xml in [
        "<qemu:commandline><qemu:arg value='-a'/><qemu:arg value='b'/></qemu:commandline>",
        "<commandline><arg value='-a'/><arg value='b'/></commandline>",
    ] {
        let line: QemuCommandline = from_str(xml).unwrap_or_else(|e| panic!("{e}"));
        let values: Vec<&str> = line.args.iter().map(|a| a.value.as_str()).collect();
        assert_eq!(values, ["-a", "b"], "{xml}");
    }
}

#[test]
fn unknown_elements_and_attributes_are_skipped() {
    let got = sample(
        "<s name='a' z:unknown='1' other='&lt;'><seclabel type='dynamic'><label>x</label>\
         </seclabel><resource><partition>/machine</partition></resource><title>t</title></s>",
    );
    assert_eq!(got.name, "a");
    assert_eq!(got.title.as_deref(), Some("t"));
}

#[test]
fn escapes_character_references_and_cdata_are_text() {
    let got = sample(
        "<s name='a&amp;b&#x20;&quot;c&quot;'><title>&lt;x&gt; &#65;<![CDATA[<raw & text>]]>\
         <!-- skipped -->!</title></s>",
    );
    assert_eq!(got.name, "a&b \"c\"");
    assert_eq!(got.title.as_deref(), Some("<x> A<raw & text>!"));
    // Attribute values are normalised as XML says: a newline is a space.
    assert_eq!(sample("<s name='a\nb'/>").name, "a b");
}

#[test]
fn bad_values_say_where_they_are() {
    let err = from_str::<Sample>("<s><item id='1'/><item id='x'/></s>").err();
    assert_eq!(
        err.as_deref(),
        Some("/s/item[2]/@id: expected an unsigned integer, found \"x\"")
    );
    let err = from_str::<Sample>("<s><on>yes</on></s>").err();
    assert_eq!(
        err.as_deref(),
        Some("/s/on: expected true, false, 1 or 0, found \"yes\"")
    );
    let err = from_str::<Sample>("<s count='4294967296'/>").err();
    assert!(
        err.as_deref()
            .is_some_and(|e| e.starts_with("/s/@count: invalid value: integer `4294967296`")),
        "{err:?}"
    );
    let err = from_str::<Sample>("<s><title><b/></title></s>").err();
    assert_eq!(
        err.as_deref(),
        Some("/s/title: expected text, found the element <b>")
    );
    let err =
        from_str::<Disk>("<disk><target dev='vda'/><address type='pci'/><boot order='-1'/></disk>")
            .err();
    assert_eq!(
        err.as_deref(),
        Some("/disk/boot/@order: expected an unsigned integer, found \"-1\"")
    );
}

#[test]
fn malformed_documents_are_errors_not_panics() {
    let cases = [
        "",
        "   ",
        "not xml",
        "<domain>",
        "<domain><name>x</name>",
        "<domain></name>",
        "<domain><name>x</domain>",
        "</domain>",
        "<domain a='1' a='2'/>",
        "<domain a=1/>",
        "<domain>&unknown;</domain>",
        "<domain>&#xD800;</domain>",
        "<domain/><domain/>",
        "<domain/>trailing",
        "text<domain/>",
        "<domain><!-- unclosed",
        "<domain><![CDATA[ unclosed",
        "<domain",
        "<?xml version='9.9'?><domain/>",
    ];
    for xml in cases {
        let result = std::panic::catch_unwind(|| Domain::from_xml(xml));
        match result {
            Ok(Err(err)) => assert!(err.message.starts_with("invalid domain XML: "), "{err}"),
            Ok(Ok(_)) => panic!("{xml:?} is not domain XML"),
            Err(_) => panic!("panicked on {xml:?}"),
        }
    }
    // quick-xml's reader lets these through (an empty domain); they must
    // not panic either.
    for xml in ["<domain a='<'/>", "<a:b:c/>", "<domain>\u{0}</domain>"] {
        assert!(
            std::panic::catch_unwind(|| Domain::from_xml(xml)).is_ok(),
            "{xml:?}"
        );
    }
    // Each truncation of a real document is an error, never a panic.
    let live = include_str!("../testdata/live-qemu.xml");
    let cut_points = live.char_indices().map(|(i, _)| i).step_by(7);
    for cut in cut_points {
        let Some(prefix) = live.get(..cut) else {
            continue;
        };
        assert!(Domain::from_xml(prefix).is_err(), "cut at {cut}");
    }
}

#[test]
fn nesting_is_bounded() {
    let deep = |levels: usize| {
        let mut xml = String::new();
        for _ in 0..levels {
            xml.push_str("<a>");
        }
        for _ in 0..levels {
            xml.push_str("</a>");
        }
        xml
    };
    assert!(from_str::<Sample>(&deep(MAX_DEPTH)).is_ok());
    let err = from_str::<Sample>(&deep(MAX_DEPTH + 1)).err();
    assert!(
        err.as_deref()
            .is_some_and(|e| e.starts_with("elements nest deeper than 256 levels")),
        "{err:?}"
    );
    // Far deeper than any stack could take recursively: still an error.
    assert!(from_str::<Sample>(&deep(100_000)).is_err());
}

/// Every item of a wide document with many distinct names among its
/// siblings (where the reader switches from comparing names to a set);
/// that the time per element stays the same as documents grow is a figure
/// of scripts/bench.sh (`conversion`, Domain XML reading).
#[test]
fn wide_documents_with_many_distinct_names_are_read_whole() {
    let mut xml = String::from("<s>");
    for i in 0..20_000 {
        xml.push_str(&format!("<e{i}/><item id='{i}'/>"));
    }
    xml.push_str("</s>");
    assert_eq!(sample(&xml).items.len(), 20_000);
}

/// Every domain XML the repository holds: the golden files of the
/// converter and the live XML libvirt returned.
pub(in crate::domxml) fn documents() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in ["tests/golden", "src/domxml/testdata"] {
        let entries = fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "xml") {
                let xml = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
                found.push((path.display().to_string(), xml));
            }
        }
    }
    found.sort();
    found
}

/// The reader gives what quick-xml's serde deserializer (which it
/// replaces; linked into tests only) gives, on every document we have and
/// on edge cases of the mapping.
#[test]
fn reads_every_document_as_quick_xml_did() {
    let documents = documents();
    assert!(documents.len() >= 10, "{}", documents.len());
    for (path, xml) in &documents {
        let ours = Domain::from_xml(xml).unwrap_or_else(|e| panic!("{path}: {e}"));
        let theirs: Domain = quick_xml::de::from_str(xml).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(ours, theirs, "{path}");
        // And what we write from it reads back the same.
        let written = ours.to_xml().unwrap_or_else(|e| panic!("{path}: {e}"));
        let again = Domain::from_xml(&written).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(again, ours, "{path}");
    }
    let snippets = [
        "<s name=' a ' count='7'>x<title> t </title></s>",
        "<s><item id='1'/><title/><item id='2'>v</item></s>",
        "<s>\n  <title>\n    t\n  </title>\n</s>",
        "<s label=''/>",
        "<s><on>1</on><size> 42 </size></s>",
        "<s><x:tagged id='1'/></s>",
        "<s><tagged id='1'/></s>",
        "<s>&amp;&#x41;<![CDATA[c]]></s>",
        "<s name='&lt;&#10;'/>",
        "<s><item id='1'><deep><deeper/></deep>text</item></s>",
        "<s><!-- c --><item id='3'/><?pi x?></s>",
    ];
    for xml in snippets {
        let ours = from_str::<Sample>(xml).unwrap_or_else(|e| panic!("{xml}: {e}"));
        let theirs: Sample = quick_xml::de::from_str(xml).unwrap_or_else(|e| panic!("{xml}: {e}"));
        assert_eq!(ours, theirs, "{xml}");
    }
    let both_refuse = [
        "<s count=''/>",
        "<s count='x'/>",
        "<s><on>yes</on></s>",
        "<s><item id='-1'/></s>",
        "<s><title><b/></title></s>",
        "<s><size>1.5</size></s>",
        "<s>",
    ];
    for xml in both_refuse {
        assert!(from_str::<Sample>(xml).is_err(), "{xml}");
        assert!(quick_xml::de::from_str::<Sample>(xml).is_err(), "{xml}");
    }
}
