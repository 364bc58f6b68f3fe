//! A serde `Deserializer` over the element tree, with quick-xml's mapping
//! (which the `#[derive(Deserialize)]` types of `domxml` are written for):
//! a field `@name` is an attribute, `$text` the element's text, any other
//! field the child elements of that (local) name: all of them for a list,
//! wherever they are among their siblings, the first one otherwise.
//!
//! Everything generic here is a thin call of the visitor; finding values,
//! parsing numbers and building errors is in plain functions, so that the
//! code each domain type adds to the binary stays small.

use std::fmt;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::tree::{Element, is_blank};

/// What went wrong, and where: the path is collected while the error
/// travels up the tree (innermost first). Boxed: every derived visitor
/// passes errors up through each field, and a pointer is cheaper to move
/// (in code size, too) than the whole record.
#[derive(Debug)]
pub struct Error(Box<Details>);

#[derive(Debug)]
struct Details {
    message: String,
    path: Vec<String>,
    /// Set by a list: the 1-based position of the item that failed, which
    /// the parent writes after the element's name (`disk[2]`).
    item: Option<usize>,
}

impl Error {
    #[cold]
    #[inline(never)]
    fn new(message: String) -> Self {
        Error(Box::new(Details {
            message,
            path: Vec::new(),
            item: None,
        }))
    }

    /// The error as a person reads it: `/domain/devices/disk[2]/@index: …`.
    pub fn located_in(self, root: &str) -> String {
        let Details { message, path, .. } = *self.0;
        let mut out = format!("/{root}");
        for segment in path.iter().rev() {
            out.push('/');
            out.push_str(segment);
        }
        out.push_str(": ");
        out.push_str(&message);
        out
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(msg.to_string())
    }
}

/// Where a value comes from.
#[derive(Clone, Copy)]
enum Source<'t, 'de> {
    /// An attribute's value or an element's text: a simple value.
    Text(&'t str),
    /// A whole element: the document's root or one item of a list.
    Element(&'t Element<'de>),
    /// The children of `parent` named like `parent.children[first]`.
    Children {
        parent: &'t Element<'de>,
        first: usize,
    },
}

/// Deserializes one value from its [`Source`].
pub struct ValueDe<'t, 'de> {
    source: Source<'t, 'de>,
}

impl<'t, 'de> ValueDe<'t, 'de> {
    pub fn root(element: &'t Element<'de>) -> Self {
        ValueDe {
            source: Source::Element(element),
        }
    }

    /// The element a struct is read from.
    #[inline(never)]
    fn element(&self) -> Result<&'t Element<'de>, Error> {
        match self.source {
            Source::Element(element) => Ok(element),
            Source::Children { parent, first } => parent
                .children
                .get(first)
                .ok_or_else(|| Error::new("internal: a child went missing".to_string())),
            Source::Text(text) => Err(Error::new(format!(
                "expected an element, found the text value {text:?}"
            ))),
        }
    }

    /// The text a simple value (string, number, boolean) is read from: an
    /// attribute's value, or the text of an element without children.
    #[inline(never)]
    fn text(&self) -> Result<&'t str, Error> {
        if let Source::Text(text) = self.source {
            return Ok(text);
        }
        let element = self.element()?;
        match element.children.first() {
            None => Ok(&element.text),
            Some(child) => Err(Error::new(format!(
                "expected text, found the element <{}>",
                child.name
            ))),
        }
    }

    #[inline(never)]
    fn unsigned(&self) -> Result<u64, Error> {
        let text = self.text()?;
        trim(text)
            .parse()
            .map_err(|_| Error::new(format!("expected an unsigned integer, found {text:?}")))
    }

    #[inline(never)]
    fn signed(&self) -> Result<i64, Error> {
        let text = self.text()?;
        trim(text)
            .parse()
            .map_err(|_| Error::new(format!("expected an integer, found {text:?}")))
    }

    #[inline(never)]
    fn float(&self) -> Result<f64, Error> {
        let text = self.text()?;
        trim(text)
            .parse()
            .map_err(|_| Error::new(format!("expected a number, found {text:?}")))
    }

    /// XML Schema's booleans, as quick-xml reads them.
    #[inline(never)]
    fn boolean(&self) -> Result<bool, Error> {
        let text = self.text()?;
        match trim(text) {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(Error::new(format!(
                "expected true, false, 1 or 0, found {text:?}"
            ))),
        }
    }

    #[inline(never)]
    fn list(&self) -> Result<ChildList<'t, 'de>, Error> {
        match self.source {
            Source::Children { parent, first } => Ok(ChildList::new(parent, first)),
            _ => Err(Error::new(
                "a list is read from repeated elements only".to_string(),
            )),
        }
    }
}

/// XML white space around a number or boolean is not part of it.
fn trim(text: &str) -> &str {
    text.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'))
}

macro_rules! simple {
    ($($method:ident => $read:ident, $visit:ident;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            let value = self.$read()?;
            visitor.$visit(value)
        }
    )*};
}

impl<'t, 'de> de::Deserializer<'de> for ValueDe<'t, 'de> {
    type Error = Error;

    simple! {
        deserialize_bool => boolean, visit_bool;
        deserialize_u8 => unsigned, visit_u64;
        deserialize_u16 => unsigned, visit_u64;
        deserialize_u32 => unsigned, visit_u64;
        deserialize_u64 => unsigned, visit_u64;
        deserialize_i8 => signed, visit_i64;
        deserialize_i16 => signed, visit_i64;
        deserialize_i32 => signed, visit_i64;
        deserialize_i64 => signed, visit_i64;
        deserialize_f32 => float, visit_f64;
        deserialize_f64 => float, visit_f64;
        deserialize_str => text, visit_str;
        deserialize_string => text, visit_str;
        deserialize_char => text, visit_str;
        deserialize_bytes => text, visit_str;
        deserialize_byte_buf => text, visit_str;
        deserialize_identifier => text, visit_str;
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.source {
            Source::Text(text) => visitor.visit_str(text),
            _ => self.deserialize_map(visitor),
        }
    }

    /// quick-xml's rule: a value that is there is `Some`, even an empty
    /// attribute or `<x/>`; only an absent one is `None`.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(self.list()?)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    // Not inlined: the derived visitor of each struct (Alias, Address, ...)
    // is then in the binary once, not once per field that holds it.
    #[inline(never)]
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(ElementMap::new(self.element()?))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// Unit variants named by the text (`<x>variant</x>`, `a='variant'`).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(StrDeserializer::<Error>::new(self.text()?))
    }
}

/// What the next value of an element's map is.
#[derive(Clone, Copy)]
enum Key {
    Attribute(usize),
    Text,
    Child(usize),
}

/// An element as a map: its attributes (`@name`), its text (`$text`, when
/// not blank), then each distinct child name once.
struct ElementMap<'t, 'de> {
    element: &'t Element<'de>,
    /// The next key: attributes, the text, then the children, by index.
    cursor: usize,
    current: Option<Key>,
    /// `@` and an attribute's name.
    key: String,
}

impl<'t, 'de> ElementMap<'t, 'de> {
    fn new(element: &'t Element<'de>) -> Self {
        ElementMap {
            element,
            cursor: 0,
            current: None,
            key: String::new(),
        }
    }

    /// Moves to the next key and returns its name.
    #[inline(never)]
    fn advance(&mut self) -> Option<&str> {
        let element = self.element;
        let attributes = element.attributes.len();
        loop {
            let at = self.cursor;
            self.cursor += 1;
            if let Some((name, _)) = element.attributes.get(at) {
                self.current = Some(Key::Attribute(at));
                attribute_key(&mut self.key, name);
                return Some(&self.key);
            }
            if at == attributes {
                if is_blank(&element.text) {
                    continue;
                }
                self.current = Some(Key::Text);
                return Some("$text");
            }
            let index = at - attributes - 1;
            let child = element.children.get(index)?;
            if !child.repeated {
                self.current = Some(Key::Child(index));
                return Some(child.local_name());
            }
        }
    }

    #[inline(never)]
    fn value(&mut self) -> Result<ValueDe<'t, 'de>, Error> {
        let element = self.element;
        let source = match self.current {
            Some(Key::Attribute(at)) => element
                .attributes
                .get(at)
                .map(|(_, value)| Source::Text(value)),
            Some(Key::Text) => Some(Source::Text(&element.text)),
            Some(Key::Child(first)) => Some(Source::Children {
                parent: element,
                first,
            }),
            None => None,
        };
        source
            .map(|source| ValueDe { source })
            .ok_or_else(|| Error::new("internal: a value without its key".to_string()))
    }

    /// Adds the failed key to the error's path.
    #[cold]
    #[inline(never)]
    fn locate(&self, mut err: Error) -> Error {
        let element = self.element;
        let segment = match self.current {
            Some(Key::Attribute(at)) => match element.attributes.get(at) {
                Some((name, _)) => format!("@{name}"),
                None => "@?".to_string(),
            },
            Some(Key::Text) => "text()".to_string(),
            Some(Key::Child(first)) => {
                let name = element.children.get(first).map_or("?", |c| c.name);
                match err.0.item.take() {
                    Some(n) => format!("{name}[{n}]"),
                    None => name.to_string(),
                }
            }
            None => String::new(),
        };
        err.0.path.push(segment);
        err
    }
}

/// quick-xml's attribute keys: `@` and the local name, but the whole name
/// for namespace declarations (`@xmlns:qemu`) and `xml:` attributes.
fn attribute_key(key: &mut String, name: &str) {
    key.clear();
    key.push('@');
    let declaration = name
        .strip_prefix("xmlns")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'));
    if declaration || name.starts_with("xml:") {
        key.push_str(name);
    } else {
        key.push_str(name.split_once(':').map_or(name, |(_, local)| local));
    }
}

impl<'t, 'de> MapAccess<'de> for ElementMap<'t, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.advance() {
            Some(key) => seed
                .deserialize(StrDeserializer::<Error>::new(key))
                .map(Some),
            None => Ok(None),
        }
    }

    #[inline(never)]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self.value()?;
        seed.deserialize(value).map_err(|err| self.locate(err))
    }
}

/// The children of one name, as the items of a list field.
struct ChildList<'t, 'de> {
    children: &'t [Element<'de>],
    name: &'t str,
    next: usize,
    taken: usize,
    remaining: usize,
}

impl<'t, 'de> ChildList<'t, 'de> {
    fn new(parent: &'t Element<'de>, first: usize) -> Self {
        let children = parent.children.get(first..).unwrap_or_default();
        let name = children.first().map_or("", |c| c.name);
        let remaining = children.iter().filter(|c| c.name == name).count();
        ChildList {
            children,
            name,
            next: 0,
            taken: 0,
            remaining,
        }
    }

    fn next_item(&mut self) -> Option<&'t Element<'de>> {
        while let Some(child) = self.children.get(self.next) {
            self.next += 1;
            if child.name == self.name {
                self.taken += 1;
                self.remaining = self.remaining.saturating_sub(1);
                return Some(child);
            }
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn locate(&self, mut err: Error) -> Error {
        err.0.item = Some(self.taken);
        err
    }
}

impl<'t, 'de> SeqAccess<'de> for ChildList<'t, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(item) = self.next_item() else {
            return Ok(None);
        };
        seed.deserialize(ValueDe::root(item))
            .map(Some)
            .map_err(|err| self.locate(err))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}
