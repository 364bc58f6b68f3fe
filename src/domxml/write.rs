//! The domain XML writer: the domain types' derived `Serialize` fills a
//! small tree ([`Node`]) through a serde serializer of our own, and one
//! plain function writes that tree as XML with quick-xml's serde mapping
//! (fields named `@name` are attributes, `$text` is the element's text,
//! lists repeat their element, an element with no content is written
//! `<x/>`), its escaping (quick-xml's "partial" level) and its indentation.
//!
//! It replaces quick-xml's serde serializer, whose code was instantiated
//! several times over for every type of the domain model (an element, its
//! attributes and its text each have their own serializer there); here
//! each type's `Serialize` is instantiated once, for [`NodeSerializer`],
//! and everything XML-specific is written once, for the tree. The same
//! tree gives the domain's JSON form ([`Node::into_json`], what
//! `query-domain` answers), so that serde_json's own serializer is not
//! instantiated for the domain types too.

use std::fmt::{self, Write as _};

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::{Map, Value};

/// A serialized value: what the domain types' `Serialize` produce, in
/// field order.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `None`, `()` or a unit struct: an empty element, an empty attribute.
    Null,
    Bool(bool),
    Signed(i64),
    Unsigned(u64),
    Text(String),
    /// A sequence: its element repeated once per item.
    List(Vec<Node>),
    /// A struct: `(field name, value)` in declaration order.
    Struct(Vec<(&'static str, Node)>),
}

impl Node {
    /// The JSON form `serde_json::to_value` gives the same value: `None`
    /// and `()` are `null`, a struct is an object of its fields (sorted by
    /// name, as serde_json's maps are).
    pub fn into_json(self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(value) => Value::Bool(value),
            Node::Signed(value) => Value::Number(value.into()),
            Node::Unsigned(value) => Value::Number(value.into()),
            Node::Text(text) => Value::String(text),
            Node::List(items) => Value::Array(items.into_iter().map(Node::into_json).collect()),
            Node::Struct(fields) => {
                let mut object = Map::new();
                for (key, value) in fields {
                    object.insert(key.to_string(), value.into_json());
                }
                Value::Object(object)
            }
        }
    }
}

/// A value the writer has no XML form for (a map, a float, an enum with
/// data), or a `Serialize` implementation's own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteError(String);

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteError {}

impl ser::Error for WriteError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WriteError(msg.to_string())
    }
}

fn unsupported(what: &str) -> WriteError {
    WriteError(format!("cannot write {what} as domain XML"))
}

/// Serializes `value` into its tree.
pub fn to_node<T: Serialize + ?Sized>(value: &T) -> Result<Node, WriteError> {
    value.serialize(NodeSerializer)
}

/// Writes `node` as the element `<name>`: indented by two spaces a level
/// when `indent` (as `Domain::to_xml` writes a whole domain), on one line
/// otherwise (a device for libvirt's device calls).
pub fn write_document(name: &str, node: &Node, indent: bool) -> Result<String, WriteError> {
    let mut out = String::with_capacity(4096);
    write_element(&mut out, name, node, indent.then_some(0), false)?;
    Ok(out)
}

/// One element, as quick-xml's `ElementSerializer` writes it. `depth` is
/// its indentation level (`None`: no indentation at all); `new_line`
/// whether it starts on a line of its own (false after text, as quick-xml
/// keeps an element that follows text on the text's line).
fn write_element(
    out: &mut String,
    name: &str,
    node: &Node,
    depth: Option<usize>,
    new_line: bool,
) -> Result<(), WriteError> {
    match node {
        Node::List(items) => {
            let mut new_line = new_line;
            for item in items {
                write_element(out, name, item, depth, new_line)?;
                new_line = true;
            }
            return Ok(());
        }
        Node::Struct(fields) => return write_struct(out, name, fields, depth, new_line),
        _ => {}
    }
    if new_line {
        line_break(out, depth);
    }
    out.push('<');
    out.push_str(name);
    let empty = match node {
        Node::Null => true,
        Node::Text(text) => text.is_empty(),
        _ => false,
    };
    if empty {
        out.push_str("/>");
    } else {
        out.push('>');
        write_scalar(out, node, false)?;
        out.push_str("</");
        out.push_str(name);
        out.push('>');
    }
    Ok(())
}

fn write_struct(
    out: &mut String,
    name: &str,
    fields: &[(&'static str, Node)],
    depth: Option<usize>,
    new_line: bool,
) -> Result<(), WriteError> {
    if new_line {
        line_break(out, depth);
    }
    out.push('<');
    out.push_str(name);
    for (key, value) in fields {
        if let Some(attribute) = key.strip_prefix('@') {
            out.push(' ');
            out.push_str(attribute);
            out.push_str("=\"");
            write_scalar(out, value, true)?;
            out.push('"');
        }
    }
    out.push('>');
    let content = out.len();
    let inner = depth.map(|d| d + 1);
    // Whether the last thing written was an element (then the closing tag
    // goes on a line of its own) rather than text.
    let mut after_element = true;
    for (key, value) in fields {
        if key.starts_with('@') {
            continue;
        }
        if *key == "$text" {
            write_scalar(out, value, false)?;
            after_element = false;
        } else {
            write_element(out, key, value, inner, after_element)?;
            after_element = true;
        }
    }
    if out.len() == content {
        out.pop();
        out.push_str("/>");
    } else {
        if after_element {
            line_break(out, depth);
        }
        out.push_str("</");
        out.push_str(name);
        out.push('>');
    }
    Ok(())
}

fn line_break(out: &mut String, depth: Option<usize>) {
    if let Some(depth) = depth {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', depth * 2));
    }
}

/// An attribute's value or an element's text.
fn write_scalar(out: &mut String, node: &Node, attribute: bool) -> Result<(), WriteError> {
    match node {
        Node::Null => {}
        Node::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
        Node::Signed(value) => {
            let _ = write!(out, "{value}");
        }
        Node::Unsigned(value) => {
            let _ = write!(out, "{value}");
        }
        Node::Text(text) => escape(out, text, attribute),
        Node::List(_) => return Err(unsupported("a list as an attribute or text")),
        Node::Struct(_) => return Err(unsupported("a struct as an attribute or text")),
    }
    Ok(())
}

/// quick-xml's partial escaping: `&`, `<`, `>` and carriage returns
/// everywhere; in (double-quoted) attributes also `"`, newlines and tabs.
fn escape(out: &mut String, text: &str, attribute: bool) {
    let mut rest = text;
    while let Some(at) = rest.find(|c: char| {
        matches!(c, '&' | '<' | '>' | '\r') || (attribute && matches!(c, '"' | '\n' | '\t'))
    }) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'\r' => "&#13;",
            b'"' => "&quot;",
            b'\n' => "&#10;",
            _ => "&#9;",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Serde's view of [`Node`]: every domain type's `Serialize` is
/// instantiated for this one serializer only.
pub struct NodeSerializer;

/// A sequence's items, as they are serialized.
pub struct ListBuilder(Vec<Node>);

/// A struct's fields, as they are serialized.
pub struct StructBuilder(Vec<(&'static str, Node)>);

impl ser::Serializer for NodeSerializer {
    type Ok = Node;
    type Error = WriteError;
    type SerializeSeq = ListBuilder;
    type SerializeTuple = ListBuilder;
    type SerializeTupleStruct = ListBuilder;
    type SerializeTupleVariant = Impossible<Node, WriteError>;
    type SerializeMap = Impossible<Node, WriteError>;
    type SerializeStruct = StructBuilder;
    type SerializeStructVariant = Impossible<Node, WriteError>;

    fn serialize_bool(self, v: bool) -> Result<Node, WriteError> {
        Ok(Node::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Node, WriteError> {
        Ok(Node::Signed(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<Node, WriteError> {
        Ok(Node::Signed(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<Node, WriteError> {
        Ok(Node::Signed(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<Node, WriteError> {
        Ok(Node::Signed(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Node, WriteError> {
        Ok(Node::Unsigned(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Node, WriteError> {
        Ok(Node::Unsigned(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Node, WriteError> {
        Ok(Node::Unsigned(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Node, WriteError> {
        Ok(Node::Unsigned(v))
    }
    fn serialize_f32(self, _v: f32) -> Result<Node, WriteError> {
        Err(unsupported("a floating-point number"))
    }
    fn serialize_f64(self, _v: f64) -> Result<Node, WriteError> {
        Err(unsupported("a floating-point number"))
    }
    fn serialize_char(self, v: char) -> Result<Node, WriteError> {
        Ok(Node::Text(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Node, WriteError> {
        Ok(Node::Text(v.to_string()))
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<Node, WriteError> {
        Err(unsupported("bytes"))
    }
    fn serialize_none(self) -> Result<Node, WriteError> {
        Ok(Node::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Node, WriteError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Node, WriteError> {
        Ok(Node::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Node, WriteError> {
        Ok(Node::Null)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Node, WriteError> {
        Ok(Node::Text(variant.to_string()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Node, WriteError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<Node, WriteError> {
        Err(unsupported("an enum with data"))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<ListBuilder, WriteError> {
        Ok(ListBuilder(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<ListBuilder, WriteError> {
        Ok(ListBuilder(Vec::with_capacity(len)))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<ListBuilder, WriteError> {
        Ok(ListBuilder(Vec::with_capacity(len)))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, WriteError> {
        Err(unsupported("an enum with data"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, WriteError> {
        Err(unsupported("a map"))
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<StructBuilder, WriteError> {
        Ok(StructBuilder(Vec::with_capacity(len)))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, WriteError> {
        Err(unsupported("an enum with data"))
    }
}

impl ser::SerializeSeq for ListBuilder {
    type Ok = Node;
    type Error = WriteError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
        self.0.push(value.serialize(NodeSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Node, WriteError> {
        Ok(Node::List(self.0))
    }
}

impl ser::SerializeTuple for ListBuilder {
    type Ok = Node;
    type Error = WriteError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Node, WriteError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for ListBuilder {
    type Ok = Node;
    type Error = WriteError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Node, WriteError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeStruct for StructBuilder {
    type Ok = Node;
    type Error = WriteError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), WriteError> {
        self.0.push((key, value.serialize(NodeSerializer)?));
        Ok(())
    }
    fn end(self) -> Result<Node, WriteError> {
        Ok(Node::Struct(self.0))
    }
}

#[cfg(test)]
mod tests;
