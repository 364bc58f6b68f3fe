//! Domain XML as a small element tree, read with quick-xml's event reader.
//!
//! Names, attribute values and text borrow from the input when they need no
//! unescaping, so a tree costs one `Vec` per element with attributes or
//! children and little else. Comments, processing instructions, the XML
//! declaration and a DOCTYPE are skipped; CDATA is text.

use std::borrow::Cow;
use std::collections::HashSet;

use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::attributes::Attributes;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::QName;
use quick_xml::reader::Reader;

/// How deep elements may nest: libvirt's domain XML is about 6 levels deep;
/// the bound keeps a hostile document from exhausting the stack of the
/// recursive deserializer (and of the tree's drop).
pub const MAX_DEPTH: usize = 256;

/// One element: its name as written (`qemu:commandline`), its attributes in
/// document order (values unescaped), its text and its child elements.
#[derive(Debug, Default)]
pub struct Element<'de> {
    pub name: &'de str,
    pub attributes: Vec<(&'de str, Cow<'de, str>)>,
    /// With child elements: the non-blank text runs between them, joined
    /// (whitespace-only runs are indentation). Without: all of the text,
    /// blank or not, as a string value's element keeps it.
    pub text: Cow<'de, str>,
    pub children: Vec<Element<'de>>,
    /// An earlier sibling has the same name: this one is not a new key of
    /// its parent but one more item of that sibling's list.
    pub repeated: bool,
}

impl Element<'_> {
    /// The name without its namespace prefix (`commandline`), which is the
    /// key a struct field is matched by.
    pub fn local_name(&self) -> &str {
        QName(self.name).local_name().into_inner()
    }
}

/// Whether `text` is only XML white space (what indentation is made of).
pub fn is_blank(text: &str) -> bool {
    text.bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// An element being read: the text runs seen so far, kept apart until the
/// element ends (whether it has children decides which text it keeps).
struct Open<'de> {
    element: Element<'de>,
    /// The text run since the last tag, and whether it is non-blank.
    run: Cow<'de, str>,
}

impl<'de> Open<'de> {
    fn new(element: Element<'de>) -> Self {
        Open {
            element,
            run: Cow::Borrowed(""),
        }
    }

    fn push_text(&mut self, text: Cow<'de, str>) {
        if self.run.is_empty() {
            self.run = text;
        } else {
            self.run.to_mut().push_str(&text);
        }
    }

    /// A tag ends the current text run: keep it if it says something.
    fn end_run(&mut self) {
        let run = std::mem::take(&mut self.run);
        if is_blank(&run) {
            return;
        }
        let text = &mut self.element.text;
        if text.is_empty() {
            *text = run;
        } else {
            text.to_mut().push_str(&run);
        }
    }

    fn finish(mut self) -> Element<'de> {
        if self.element.children.is_empty() {
            self.element.text = self.run;
        } else {
            self.end_run();
            mark_repeated(&mut self.element.children);
        }
        self.element
    }
}

/// Marks each child whose name an earlier sibling has.
fn mark_repeated(children: &mut [Element<'_>]) {
    // Few children (the common case): compare with the earlier ones.
    if children.len() <= 16 {
        for i in 1..children.len() {
            let (earlier, rest) = children.split_at_mut(i);
            if let Some(child) = rest.first_mut() {
                child.repeated = earlier.iter().any(|e| e.name == child.name);
            }
        }
        return;
    }
    let mut seen = HashSet::with_capacity(children.len());
    for child in children.iter_mut() {
        child.repeated = !seen.insert(child.name);
    }
}

/// `part` as a slice of `input` with `input`'s lifetime, when it is one
/// (everything quick-xml's reader returns from a `&str` is).
fn within<'de>(input: &'de str, part: &str) -> Option<&'de str> {
    let start = (part.as_ptr() as usize).checked_sub(input.as_ptr() as usize)?;
    input.get(start..start.checked_add(part.len())?)
}

/// Reads `input` into its root element.
pub fn parse(input: &str) -> Result<Element<'_>, String> {
    let mut reader = Reader::from_str(input);
    let mut version = XmlVersion::Implicit1_0;
    let mut stack: Vec<Open<'_>> = Vec::with_capacity(16);
    let mut root = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|err| format!("malformed XML at byte {}: {err}", reader.error_position()))?;
        let at = reader.buffer_position();
        match event {
            Event::Start(start) | Event::Empty(start) if root.is_some() => {
                return Err(format!(
                    "a second root element <{}> at byte {at}",
                    start.name().as_ref()
                ));
            }
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(format!(
                        "elements nest deeper than {MAX_DEPTH} levels at byte {at}"
                    ));
                }
                if let Some(parent) = stack.last_mut() {
                    parent.end_run();
                }
                stack.push(Open::new(element(input, &start, version, at)?));
            }
            Event::Empty(start) => {
                let element = element(input, &start, version, at)?;
                match stack.last_mut() {
                    Some(parent) => {
                        parent.end_run();
                        parent.element.children.push(element);
                    }
                    None => root = Some(element),
                }
            }
            // The reader has checked that the name matches the open one.
            Event::End(_) => {
                let Some(open) = stack.pop() else {
                    return Err(format!("an end tag with no open element at byte {at}"));
                };
                let element = open.finish();
                match stack.last_mut() {
                    Some(parent) => parent.element.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::Text(text) => match stack.last_mut() {
                Some(open) => open.push_text(text.xml_content(version)),
                None => outside_root(&text.xml_content(version), at)?,
            },
            Event::CData(data) => match stack.last_mut() {
                Some(open) => open.push_text(data.xml_content(version)),
                None => outside_root(&data.xml_content(version), at)?,
            },
            Event::GeneralRef(reference) => {
                let resolved: Cow<'_, str> = match reference.resolve_char_ref() {
                    Ok(Some(ch)) => Cow::Owned(ch.to_string()),
                    Ok(None) => match resolve_predefined_entity(&reference) {
                        Some(text) => Cow::Borrowed(text),
                        None => {
                            return Err(format!("unknown entity &{}; at byte {at}", &*reference));
                        }
                    },
                    Err(err) => return Err(format!("{err} at byte {at}")),
                };
                match stack.last_mut() {
                    Some(open) => open.push_text(resolved),
                    None => outside_root(&resolved, at)?,
                }
            }
            Event::Decl(decl) => {
                version = decl
                    .xml_version()
                    .map_err(|err| format!("bad XML declaration: {err}"))?;
            }
            Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!(
            "the document ends inside <{}> (not closed)",
            open.element.name
        ));
    }
    root.ok_or_else(|| "no root element".to_string())
}

/// Text before or after the root element may only be white space.
fn outside_root(text: &str, at: u64) -> Result<(), String> {
    if is_blank(text) {
        return Ok(());
    }
    let shown: String = text.trim().chars().take(20).collect();
    Err(format!(
        "text {shown:?} outside the root element at byte {at}"
    ))
}

/// The element a start tag opens, with its attributes.
fn element<'de>(
    input: &'de str,
    start: &BytesStart<'_>,
    version: XmlVersion,
    at: u64,
) -> Result<Element<'de>, String> {
    let Some(content) = within(input, start) else {
        return Err(format!(
            "internal: the tag at byte {at} is not in the input"
        ));
    };
    let name_len = start.name().as_ref().len();
    let name = content.get(..name_len).unwrap_or(content);
    let mut attributes = Vec::new();
    for attribute in Attributes::new(content, name_len) {
        let attribute =
            attribute.map_err(|err| format!("bad attribute in <{name}> at byte {at}: {err}"))?;
        let key = attribute.key.0;
        let value = attribute.normalized_value(version).map_err(|err| {
            format!("bad value of attribute {key:?} of <{name}> at byte {at}: {err}")
        })?;
        attributes.push((key, value));
    }
    Ok(Element {
        name,
        attributes,
        ..Element::default()
    })
}
