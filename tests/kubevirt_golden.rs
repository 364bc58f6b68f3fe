//! Our domain XML against KubeVirt's for the same VMI, element by element.
//!
//! `tests/golden/kubevirt/<example>.xml` is the domain KubeVirt's own
//! launcher defined for `tests/golden/kubevirt/<example>.vmi.json` (the
//! example with KubeVirt's webhook defaults, as virt-handler hands it over);
//! `scripts/kubevirt-reference.sh` regenerates both from `../shared/kubevirt`.
//! Every difference between that XML and our converter's must be listed in
//! `docs/kubevirt-differences.md`, and every entry listed there must still
//! occur: a new difference, or one that went away, fails the test.
//! This runs no program and needs no libvirt.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::Path;

use common::examples::*;
use virt_launcher::convert::{DomainType, convert};
use virt_launcher::domxml::read::{Element, parse_tree};
use virt_launcher::vmi::parse_vmi;

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/kubevirt");
const DIFFERENCES_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/kubevirt-differences.md");

/// Which side has something the other lacks, or that both have it unlike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    OnlyKubevirt,
    OnlyOurs,
    Differs,
    Order,
}

impl Kind {
    /// As the "kind" column of docs/kubevirt-differences.md says it.
    fn parse(text: &str) -> Option<Kind> {
        match text {
            "only KubeVirt's" => Some(Kind::OnlyKubevirt),
            "only ours" => Some(Kind::OnlyOurs),
            "differs" => Some(Kind::Differs),
            "order" => Some(Kind::Order),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::OnlyKubevirt => "only KubeVirt's",
            Kind::OnlyOurs => "only ours",
            Kind::Differs => "differs",
            Kind::Order => "order",
        })
    }
}

/// One difference: where (`/domain/devices/disk[alias=ua-root]/driver/@cache`),
/// what kind, and the values for a reader.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    location: String,
    kind: Kind,
    detail: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.location, self.kind, self.detail)
    }
}

/// How an element is told apart from its same-named siblings, so that the
/// two documents' elements are paired whatever their order: the user alias
/// of a device, the identifying attributes of the elements that have one,
/// else its position among its same-named siblings.
fn key(element: &Element<'_>, position: usize) -> String {
    let attribute = |name: &str| {
        element
            .attributes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    if let Some(alias) = element
        .children
        .iter()
        .find(|c| c.name == "alias")
        .and_then(|a| a.attributes.iter().find(|(n, _)| *n == "name"))
    {
        return format!("alias={}", alias.1);
    }
    let identifying: &[&str] = match element.name {
        "controller" => &["type", "index"],
        "entry" | "feature" => &["name"],
        "vcpu" | "cell" => &["id"],
        "vcpupin" => &["vcpu"],
        "input" => &["type", "bus"],
        _ => &[],
    };
    let parts: Vec<String> = identifying
        .iter()
        .filter_map(|name| attribute(name).map(|v| format!("{name}={v}")))
        .collect();
    if parts.is_empty() {
        format!("{position}")
    } else {
        parts.join(",")
    }
}

/// The children of `element` grouped by name, each group in document order
/// with its keys.
fn groups<'a, 'de>(
    element: &'a Element<'de>,
) -> BTreeMap<&'de str, Vec<(String, &'a Element<'de>)>> {
    let mut groups: BTreeMap<&str, Vec<(String, &Element<'_>)>> = BTreeMap::new();
    for child in &element.children {
        let group = groups.entry(child.name).or_default();
        let position = group.len() + 1;
        group.push((key(child, position), child));
    }
    groups
}

/// An element as one line, for a difference that says it is missing.
fn summary(element: &Element<'_>) -> String {
    let attributes: String = element
        .attributes
        .iter()
        .map(|(n, v)| format!(" {n}=\"{v}\""))
        .collect();
    let inner = match (element.children.len(), element.text.trim()) {
        (0, "") => String::new(),
        (0, text) => text.to_string(),
        (n, _) => format!("({n} children)"),
    };
    format!("<{}{attributes}>{inner}", element.name)
}

/// `at/name[key]`, or `at/name` for the only element of that name.
fn step(at: &str, name: &str, key: &str, most: usize) -> String {
    if most <= 1 && key == "1" {
        format!("{at}/{name}")
    } else {
        format!("{at}/{name}[{key}]")
    }
}

fn diff(ours: &Element<'_>, theirs: &Element<'_>, at: &str, out: &mut Vec<Difference>) {
    let mut push = |location: String, kind, detail: String| {
        out.push(Difference {
            location,
            kind,
            detail,
        })
    };
    let ours_attributes: BTreeMap<&str, &str> = ours
        .attributes
        .iter()
        .map(|(n, v)| (*n, v.as_ref()))
        .collect();
    let theirs_attributes: BTreeMap<&str, &str> = theirs
        .attributes
        .iter()
        .map(|(n, v)| (*n, v.as_ref()))
        .collect();
    for (name, value) in &ours_attributes {
        match theirs_attributes.get(name) {
            None => push(
                format!("{at}/@{name}"),
                Kind::OnlyOurs,
                format!("\"{value}\""),
            ),
            Some(other) if other != value => push(
                format!("{at}/@{name}"),
                Kind::Differs,
                format!("ours \"{value}\", KubeVirt's \"{other}\""),
            ),
            Some(_) => {}
        }
    }
    for (name, value) in &theirs_attributes {
        if !ours_attributes.contains_key(name) {
            push(
                format!("{at}/@{name}"),
                Kind::OnlyKubevirt,
                format!("\"{value}\""),
            );
        }
    }
    let (ours_text, theirs_text) = (ours.text.trim(), theirs.text.trim());
    if ours_text != theirs_text {
        push(
            format!("{at}/text()"),
            Kind::Differs,
            format!("ours \"{ours_text}\", KubeVirt's \"{theirs_text}\""),
        );
    }
    let ours_groups = groups(ours);
    let theirs_groups = groups(theirs);
    for (name, ours_group) in &ours_groups {
        let theirs_group = theirs_groups.get(name).map(Vec::as_slice).unwrap_or(&[]);
        for (key, child) in ours_group {
            let location = step(at, name, key, ours_group.len().max(theirs_group.len()));
            match theirs_group.iter().find(|(k, _)| k == key) {
                Some((_, other)) => diff(child, other, &location, out),
                None => out.push(Difference {
                    location,
                    kind: Kind::OnlyOurs,
                    detail: summary(child),
                }),
            }
        }
        let common = |group: &[(String, &Element<'_>)], other: &[(String, &Element<'_>)]| {
            group
                .iter()
                .map(|(k, _)| k.clone())
                .filter(|k| other.iter().any(|(o, _)| o == k))
                .collect::<Vec<_>>()
        };
        let (ours_order, theirs_order) = (
            common(ours_group, theirs_group),
            common(theirs_group, ours_group),
        );
        if ours_order != theirs_order {
            out.push(Difference {
                location: format!("{at}/{name}"),
                kind: Kind::Order,
                detail: format!("ours {ours_order:?}, KubeVirt's {theirs_order:?}"),
            });
        }
    }
    for (name, theirs_group) in &theirs_groups {
        let ours_group = ours_groups.get(name).map(Vec::as_slice).unwrap_or(&[]);
        for (key, child) in theirs_group {
            if !ours_group.iter().any(|(k, _)| k == key) {
                out.push(Difference {
                    location: step(at, name, key, ours_group.len().max(theirs_group.len())),
                    kind: Kind::OnlyKubevirt,
                    detail: summary(child),
                });
            }
        }
    }
}

fn differences(ours: &str, theirs: &str) -> Vec<Difference> {
    let ours = parse_tree(ours).unwrap_or_else(|e| panic!("our XML: {e}"));
    let theirs = parse_tree(theirs).unwrap_or_else(|e| panic!("KubeVirt's XML: {e}"));
    let mut out = Vec::new();
    let root = format!("/{}", ours.name);
    if ours.name != theirs.name {
        out.push(Difference {
            location: root,
            kind: Kind::Differs,
            detail: format!("root <{}> and <{}>", ours.name, theirs.name),
        });
    } else {
        diff(&ours, &theirs, &root, &mut out);
    }
    out.sort();
    out
}

/// `pattern` with `*` standing for any run of characters matches all of `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// One row of a table in docs/kubevirt-differences.md.
#[derive(Debug)]
struct Entry {
    line: usize,
    location: String,
    kind: Kind,
    /// `None`: every example.
    examples: Option<Vec<String>>,
}

impl Entry {
    fn allows(&self, example: &str, difference: &Difference) -> bool {
        self.kind == difference.kind
            && glob(&self.location, &difference.location)
            && self
                .examples
                .as_ref()
                .is_none_or(|list| list.iter().any(|e| e == example))
    }
}

/// The sections of docs/kubevirt-differences.md whose tables list domain
/// XML differences (the document's other tables, such as what virt-handler
/// reads through the launcher's gRPC calls, belong to other tests).
const DOMAIN_XML_SECTIONS: [&str; 4] = [
    "Added by libvirt on define",
    "Written by KubeVirt's Go structures",
    "Deliberate",
    "Known, not yet matched",
];

/// The rows of the doc's domain XML tables ([`DOMAIN_XML_SECTIONS`]):
/// `` | `location` | kind | examples | reason | ``.
fn documented_entries() -> Vec<Entry> {
    let text =
        fs::read_to_string(DIFFERENCES_DOC).unwrap_or_else(|e| panic!("{DIFFERENCES_DOC}: {e}"));
    let mut entries = Vec::new();
    let mut section = "";
    let mut seen = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim();
            seen.push(section);
            continue;
        }
        if !DOMAIN_XML_SECTIONS.contains(&section) {
            continue;
        }
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = row.split(" | ").collect();
        let line = index + 1;
        assert!(
            cells.len() >= 4,
            "{DIFFERENCES_DOC}:{line}: a row needs location, kind, examples and reason"
        );
        let location = cells[0]
            .strip_suffix('`')
            .unwrap_or_else(|| panic!("{DIFFERENCES_DOC}:{line}: the location ends with `"));
        let kind = Kind::parse(cells[1].trim())
            .unwrap_or_else(|| panic!("{DIFFERENCES_DOC}:{line}: unknown kind {:?}", cells[1]));
        let examples = match cells[2].trim() {
            "all" => None,
            list => Some(
                list.split(',')
                    .map(|e| e.trim().trim_matches('`').to_string())
                    .collect(),
            ),
        };
        assert!(
            !cells[3].trim().trim_end_matches('|').trim().is_empty(),
            "{DIFFERENCES_DOC}:{line}: every difference needs its reason"
        );
        entries.push(Entry {
            line,
            location: location.to_string(),
            kind,
            examples,
        });
    }
    for wanted in DOMAIN_XML_SECTIONS {
        assert!(
            seen.contains(&wanted),
            "{DIFFERENCES_DOC} has no section \"## {wanted}\" (renamed? update DOMAIN_XML_SECTIONS)"
        );
    }
    entries
}

/// The examples with a KubeVirt reference: (stem, KubeVirt's XML path).
fn references() -> Vec<(String, std::path::PathBuf)> {
    files_with_ext(REFERENCE_DIR, "xml")
}

#[test]
fn every_reference_has_its_example_and_the_vmi_kubevirt_was_given() {
    let references = references();
    assert!(
        references.len() >= 15,
        "{} references in {REFERENCE_DIR}",
        references.len()
    );
    for (stem, _) in references {
        assert!(
            Path::new(EXAMPLES_DIR)
                .join(format!("{stem}.json"))
                .is_file(),
            "{REFERENCE_DIR}/{stem}.xml has no example"
        );
        assert!(
            Path::new(REFERENCE_DIR)
                .join(format!("{stem}.vmi.json"))
                .is_file(),
            "{REFERENCE_DIR}/{stem}.xml has no {stem}.vmi.json"
        );
    }
}

/// KubeVirt's launcher got the example with the webhook's defaults; this
/// launcher converts that VMI exactly as the bare example (whose XML is the
/// golden file), so both converters were given the same VMI.
#[test]
fn the_vmi_kubevirt_was_given_converts_as_the_example() {
    for (stem, _) in references() {
        let example = example_xml(
            &Path::new(EXAMPLES_DIR).join(format!("{stem}.json")),
            DomainType::Kvm,
        );
        let given = Path::new(REFERENCE_DIR).join(format!("{stem}.vmi.json"));
        let vmi = parse_vmi(&example_json(&given)).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let conversion = convert(&vmi, &example_context(&vmi, DomainType::Kvm))
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        let xml = with_cache_modes(conversion)
            .to_xml()
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        let found = differences(&example, &xml);
        assert!(
            found.is_empty(),
            "{stem}: the defaulted VMI converts differently:\n{}",
            found
                .iter()
                .map(|d| format!("  {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn our_domains_differ_from_kubevirts_only_as_documented() {
    let entries = documented_entries();
    let mut used = vec![false; entries.len()];
    let mut undocumented = Vec::new();
    for (stem, reference) in references() {
        let ours = example_xml(
            &Path::new(EXAMPLES_DIR).join(format!("{stem}.json")),
            DomainType::Kvm,
        );
        let theirs = fs::read_to_string(&reference)
            .unwrap_or_else(|e| panic!("{}: {e}", reference.display()));
        for difference in differences(&ours, &theirs) {
            let mut allowed = false;
            for (entry, used) in entries.iter().zip(used.iter_mut()) {
                if entry.allows(&stem, &difference) {
                    *used = true;
                    allowed = true;
                }
            }
            if !allowed {
                undocumented.push(format!("{stem}: {difference}"));
            }
        }
    }
    let stale: Vec<String> = entries
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|(entry, _)| {
            format!(
                "{DIFFERENCES_DOC}:{}: `{}` ({}) matches no difference any more: remove it",
                entry.line, entry.location, entry.kind
            )
        })
        .collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "{} difference(s) from KubeVirt's domain not in docs/kubevirt-differences.md \
         (fix the converter, or list it there with its reason):\n{}\n{}",
        undocumented.len(),
        undocumented.join("\n"),
        stale.join("\n")
    );
}

#[test]
fn the_tree_diff_names_each_kind_of_difference_where_it_is() {
    let ours = r#"<domain type="kvm"><devices>
        <disk type="file"><driver cache="none"/><alias name="ua-a"/></disk>
        <disk type="file"><alias name="ua-b"/></disk>
        <controller type="pci" index="1"/></devices><name>x</name></domain>"#;
    let theirs = r#"<domain type="kvm" extra="1"><devices>
        <disk type="file"><alias name="ua-b"/></disk>
        <disk type="block"><driver/><alias name="ua-a"/></disk>
        <input type="mouse" bus="ps2"/></devices><name>y</name></domain>"#;
    let found: Vec<String> = differences(ours, theirs)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [
            "/domain/@extra (only KubeVirt's): \"1\"",
            "/domain/devices/controller[type=pci,index=1] (only ours): <controller type=\"pci\" index=\"1\">",
            "/domain/devices/disk (order): ours [\"alias=ua-a\", \"alias=ua-b\"], KubeVirt's [\"alias=ua-b\", \"alias=ua-a\"]",
            "/domain/devices/disk[alias=ua-a]/@type (differs): ours \"file\", KubeVirt's \"block\"",
            "/domain/devices/disk[alias=ua-a]/driver/@cache (only ours): \"none\"",
            "/domain/devices/input[type=mouse,bus=ps2] (only KubeVirt's): <input type=\"mouse\" bus=\"ps2\">",
            "/domain/name/text() (differs): ours \"x\", KubeVirt's \"y\"",
        ]
    );
    assert!(glob(
        "/domain/devices/*/address",
        "/domain/devices/disk[alias=ua-a]/address"
    ));
    assert!(!glob(
        "/domain/devices/*/address",
        "/domain/devices/disk[alias=ua-a]/address/@bus"
    ));
    assert!(glob("*", "/anything"));
}
