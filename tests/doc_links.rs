//! Every relative link in README.md and docs/*.md leads somewhere (issue 30):
//! the file exists, and a `#fragment` names a heading of the Markdown file it
//! points into, by GitHub's rules for a heading's anchor. The man page's
//! mentions of docs/*.md name files that exist.
//!
//! Needs nothing but the source tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file in docs/, relative to the root.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let mut in_docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The lines of a Markdown text that are not inside a fenced code block,
/// with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// A line without its code spans (`...`), in which brackets are no links.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        // A title after the target (`[x](path "title")`) is not part of it.
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// The text a heading shows: links reduced to their text, emphasis and code
/// marks removed.
fn heading_text(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](url) -> text
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text
}

/// GitHub's anchor for a heading: lower case; every character but letters,
/// digits, spaces, hyphens and underscores dropped; each space a hyphen.
fn slug(heading: &str) -> String {
    heading_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings, with GitHub's `-1`, `-2`, ...
/// for a repeated one.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// `dir/target` with `.` and `..` resolved, relative to the root; `None`
/// when it leaves the repository.
fn resolve(dir: &Path, target: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for part in dir.join(target).components() {
        match part {
            Component::Normal(p) => path.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(path)
}

/// What is wrong with each relative link of a document, one line each.
fn broken_links(doc: &Path, text: &str) -> Vec<String> {
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (n, line) in prose_lines(text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let here = format!("{}:{n}: ({target})", doc.display());
            let path = if file.is_empty() {
                Some(doc.to_path_buf())
            } else {
                resolve(dir, file)
            };
            let Some(path) = path else {
                broken.push(format!("{here}: leaves the repository"));
                continue;
            };
            if !root().join(&path).exists() {
                broken.push(format!("{here}: no file {}", path.display()));
                continue;
            }
            let Some(fragment) = fragment else {
                continue;
            };
            if path.extension().is_none_or(|e| e != "md") {
                broken.push(format!(
                    "{here}: an anchor into a file that is not Markdown"
                ));
                continue;
            }
            let target_text = fs::read_to_string(root().join(&path)).unwrap();
            if !anchors(&target_text).contains(fragment) {
                broken.push(format!(
                    "{here}: no heading #{fragment} in {}",
                    path.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut links = 0;
    for doc in documents() {
        let text = fs::read_to_string(root().join(&doc)).unwrap();
        links += prose_lines(&text)
            .iter()
            .map(|(_, l)| link_targets(l).len())
            .sum::<usize>();
        broken.extend(broken_links(&doc, &text));
    }
    // The README and the docs link to each other: a parser that found no
    // link would pass without checking anything.
    assert!(links > 50, "only {links} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_man_page_names_only_docs_that_exist() {
    let page = fs::read_to_string(root().join("man/virt-launcher.8")).unwrap();
    let mut named = BTreeSet::new();
    let mut rest = page.as_str();
    while let Some(at) = rest.find("docs/") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || "/._-".contains(*c))
            .collect();
        named.insert(name.trim_end_matches('.').to_string());
        rest = &rest[at + 5..];
    }
    assert!(!named.is_empty(), "the man page names no document");
    let missing: Vec<&String> = named.iter().filter(|n| !root().join(n).is_file()).collect();
    assert!(missing.is_empty(), "the man page names {missing:?}");
}

#[test]
fn anchors_follow_githubs_rules() {
    // Headings of this repository's documents, with the anchors GitHub
    // gives them.
    let cases = [
        ("1. Trying it out", "1-trying-it-out"),
        ("`DOMAIN_LIFECYCLE`", "domain_lifecycle"),
        (
            "One-time host set-up (without `--spawn-libvirt`, and for the tests)",
            "one-time-host-set-up-without---spawn-libvirt-and-for-the-tests",
        ),
        (
            "Backends: one static binary without libvirt's library",
            "backends-one-static-binary-without-libvirts-library",
        ),
        (
            "Start → ready, root and non-root",
            "start--ready-root-and-non-root",
        ),
        ("See [the protocol](docs/protocol.md)", "see-the-protocol"),
        (
            "19. KubeVirt's gRPC protocol (KubeVirt mode)",
            "19-kubevirts-grpc-protocol-kubevirt-mode",
        ),
    ];
    for (heading, anchor) in cases {
        assert_eq!(slug(heading), anchor, "{heading}");
    }
    let repeated = anchors("# A\n## A\n```\n# B\n```\n### A\n");
    let want: BTreeSet<String> = ["a", "a-1", "a-2"].map(String::from).into();
    assert_eq!(repeated, want);
}

#[test]
fn broken_links_are_found() {
    let doc = Path::new("docs/example.md");
    let text = "[ok](protocol.md#1-trying-it-out) [gone](nowhere.md) \
                [anchor](protocol.md#no-such-heading) [up](../README.md#tests) \
                [web](https://example.com/x.md) `[code](not-a-link.md)`\n\
                ```\n[fenced](also-not.md)\n```\n";
    let broken = broken_links(doc, text);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("no file docs/nowhere.md"), "{broken:#?}");
    assert!(
        broken[1].contains("no heading #no-such-heading"),
        "{broken:#?}"
    );
}
