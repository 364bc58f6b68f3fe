//! The wire protocol of the command socket: one compact JSON object per line.
//!
//! Three kinds of line go from the server to a client, each recognisable by
//! its first key: `hello` (once, on accept), `return`/`error` (exactly one per
//! request line, in order) and `event` (only after `subscribe`, never inside a
//! reply line). See docs/protocol.md for the full contract.

pub mod codec;
mod returned;

pub use crate::replies::Return;
pub use returned::Encoded;

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Version of the wire protocol. Additive changes (new commands, optional
/// fields, events) do not bump it.
pub const PROTOCOL_VERSION: u32 = 1;

/// The fixed set of error classes. Clients branch on these, so the set is
/// small and never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ErrorClass {
    ParseError,
    RequestTooLarge,
    InvalidRequest,
    CommandNotFound,
    InvalidArgument,
    InvalidState,
    NotFound,
    Unavailable,
    Timeout,
    Busy,
    Internal,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 11] = [
        ErrorClass::ParseError,
        ErrorClass::RequestTooLarge,
        ErrorClass::InvalidRequest,
        ErrorClass::CommandNotFound,
        ErrorClass::InvalidArgument,
        ErrorClass::InvalidState,
        ErrorClass::NotFound,
        ErrorClass::Unavailable,
        ErrorClass::Timeout,
        ErrorClass::Busy,
        ErrorClass::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ParseError => "ParseError",
            ErrorClass::RequestTooLarge => "RequestTooLarge",
            ErrorClass::InvalidRequest => "InvalidRequest",
            ErrorClass::CommandNotFound => "CommandNotFound",
            ErrorClass::InvalidArgument => "InvalidArgument",
            ErrorClass::InvalidState => "InvalidState",
            ErrorClass::NotFound => "NotFound",
            ErrorClass::Unavailable => "Unavailable",
            ErrorClass::Timeout => "Timeout",
            ErrorClass::Busy => "Busy",
            ErrorClass::Internal => "Internal",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as the client sees it: a class to branch on, a sentence for a
/// person, and the chain of underlying causes (top first, root last).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandError {
    pub class: ErrorClass,
    pub desc: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<String>,
}

impl CommandError {
    pub fn new(class: ErrorClass, desc: impl Into<String>) -> Self {
        CommandError {
            class,
            desc: desc.into(),
            causes: Vec::new(),
        }
    }

    pub fn with_cause(mut self, cause: impl Into<String>) -> Self {
        self.causes.push(cause.into());
        self
    }

    pub fn invalid_argument(desc: impl Into<String>) -> Self {
        Self::new(ErrorClass::InvalidArgument, desc)
    }

    pub fn invalid_state(desc: impl Into<String>) -> Self {
        Self::new(ErrorClass::InvalidState, desc)
    }

    pub fn internal(desc: impl Into<String>) -> Self {
        Self::new(ErrorClass::Internal, desc)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.desc)?;
        for cause in &self.causes {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CommandError {}

/// What a command returns on success: always a JSON object.
pub type CommandResult = Result<Return, CommandError>;

/// A request's `id`, as the reply echoes it: the same JSON value, written
/// compactly; a number comes back exactly as the client wrote it (`-0`,
/// `1.50`, `12345678901234567890123`), where re-encoding it would change
/// it (`-0.0`, `1.5`, `1.2345678901234568e22`).
#[derive(Debug, Clone)]
pub struct RequestId(Box<RawValue>);

impl RequestId {
    /// A compact encoding of `value`.
    pub fn from_value(value: &Value) -> RequestId {
        let raw = serde_json::value::to_raw_value(value)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).unwrap_or_default());
        RequestId(raw)
    }

    /// The id of a request line from its text there: that text for a
    /// number (re-encoding could change it), a compact re-encoding of
    /// anything else.
    fn from_raw(raw: &RawValue) -> RequestId {
        let text = raw.get();
        if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            RequestId(raw.to_owned())
        } else {
            let value = serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
            RequestId::from_value(&value)
        }
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &RequestId) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The `id` of a request line, for the reply: the raw text of a number id,
/// a compact re-encoding of anything else.
fn request_id(text: &str, id: Option<&Value>) -> Option<RequestId> {
    let id = id?;
    if id.is_number() {
        #[derive(serde::Deserialize)]
        struct IdOnly<'a> {
            #[serde(borrow)]
            id: &'a RawValue,
        }
        if let Ok(raw) = serde_json::from_str::<IdOnly>(text) {
            return Some(RequestId::from_raw(raw.id));
        }
    }
    Some(RequestId::from_value(id))
}

/// A request line that parsed: the command name, its arguments (an object,
/// empty when absent) and the client's id, echoed in the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub execute: String,
    pub arguments: Map<String, Value>,
    pub id: Option<RequestId>,
}

/// Why a line could not become a `Request`. `id` is kept when the line was
/// valid JSON and had one, so the error reply can still be correlated.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRejected {
    pub error: CommandError,
    pub id: Option<RequestId>,
}

/// The shape of nearly every request line: an object with a string
/// `execute`, at most an object (or null) `arguments` and any `id`, each
/// once. Read in one pass, with the id's text borrowed from the line.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainRequest<'a> {
    execute: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
}

/// `Some` for a member that is there, even `null` (an `Option` field alone
/// reads `"id":null` as absent, and the reply must echo it).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// A [`PlainRequest`] line as a `Request`; `None` for any other line
/// (not an object, a key twice, an unknown key, a member of the wrong
/// type, bad JSON), which [`parse_request`] reads the general way, as a
/// JSON value, and words the error for. Both ways give the same `Request`
/// for a line both accept: the id as written if a number, re-encoded
/// compactly if not.
fn parse_plain_request(text: &str) -> Option<Request> {
    // A struct also reads from a JSON array; a request must be an object.
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return None;
    }
    let plain: PlainRequest = serde_json::from_str(text).ok()?;
    // The id is read as raw text, which serde_json skips without its
    // recursion limit: a line nested too deep inside its id goes the
    // general way, which refuses it like any other line nested too deep.
    if plain
        .id
        .is_some_and(|id| 1 + nesting_depth(id.get()) >= MAX_NESTING)
    {
        return None;
    }
    Some(Request {
        execute: plain.execute,
        arguments: plain.arguments.unwrap_or_default(),
        id: plain.id.map(RequestId::from_raw),
    })
}

/// serde_json's recursion limit: a JSON text whose arrays and objects nest
/// this deep or deeper (the outermost counting 1) does not parse.
const MAX_NESTING: usize = 128;

/// How deep the arrays and objects of `json`, a valid JSON text, nest (0
/// for a scalar). One pass, no recursion, whatever the depth.
fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, RequestRejected> {
    let text = std::str::from_utf8(line).map_err(|e| RequestRejected {
        error: CommandError::new(
            ErrorClass::ParseError,
            format!("request is not valid UTF-8 (byte {})", e.valid_up_to()),
        ),
        id: None,
    })?;
    match parse_plain_request(text) {
        Some(request) => Ok(request),
        None => parse_request_value(text),
    }
}

/// Any request line, read as a JSON value first: the general way, which
/// says what is wrong with a line that is not a request.
fn parse_request_value(text: &str) -> Result<Request, RequestRejected> {
    let value: Value = serde_json::from_str(text).map_err(|e| RequestRejected {
        error: CommandError::new(ErrorClass::ParseError, parse_error(text, &e)),
        id: None,
    })?;
    let Value::Object(mut object) = value else {
        return Err(RequestRejected {
            error: CommandError::new(
                ErrorClass::InvalidRequest,
                "a request must be a JSON object like {\"execute\":\"ping\"}",
            ),
            id: None,
        });
    };
    let id = request_id(text, object.remove("id").as_ref());
    let reject = |desc: String| RequestRejected {
        error: CommandError::new(ErrorClass::InvalidRequest, desc),
        id: id.clone(),
    };
    if let Some(key) = object
        .keys()
        .find(|k| k.as_str() != "execute" && k.as_str() != "arguments")
    {
        return Err(reject(format!(
            "unknown request key \"{key}\"; a request has only \"execute\", \"arguments\" and \"id\""
        )));
    }
    let execute = match object.remove("execute") {
        Some(Value::String(name)) => name,
        Some(_) => return Err(reject("\"execute\" must be a string".into())),
        None => return Err(reject("missing \"execute\": the command to run".into())),
    };
    let arguments = match object.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args,
        Some(_) => return Err(reject("\"arguments\" must be a JSON object".into())),
    };
    Ok(Request {
        execute,
        arguments,
        id,
    })
}

/// The `desc` of a `ParseError`. A line nested too deep inside its `id`
/// says that this is why its reply has none.
fn parse_error(text: &str, error: &serde_json::Error) -> String {
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
    }
    // (A struct also reads from an array: only an object has an "id".)
    let id_too_deep = error.to_string().starts_with("recursion limit exceeded")
        && text
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('{')
        && serde_json::from_str::<IdOnly>(text)
            .ok()
            .and_then(|line| line.id)
            .is_some_and(|id| 1 + nesting_depth(id.get()) >= MAX_NESTING);
    if id_too_deep {
        format!(
            "invalid JSON: {error}; the request's \"id\" is nested too deep to be echoed, so this reply has none"
        )
    } else {
        format!("invalid JSON: {error}")
    }
}

/// Wall-clock time as QMP writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timestamp {
    pub seconds: i64,
    pub microseconds: i64,
}

impl Timestamp {
    pub fn now() -> Self {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                microseconds: i64::from(d.subsec_micros()),
            },
            // The clock is before 1970: say so the way QMP does.
            Err(_) => Timestamp {
                seconds: -1,
                microseconds: -1,
            },
        }
    }
}

/// Encodes a success reply line (with trailing newline).
pub fn encode_return(result: &Return, id: Option<&RequestId>) -> String {
    // Room for the encoded members (the bulk of a query-domain reply) up
    // front: a line grown from empty is copied at every doubling.
    let mut line = Vec::with_capacity(result.encoded_bytes() + 256);
    // The envelope is written around the object rather than serialised as
    // a struct: every reply pays for it, and the id is already its own
    // compact JSON text.
    line.extend_from_slice(b"{\"return\":");
    let written = serde_json::to_writer(&mut line, result).map(|()| {
        if let Some(id) = id {
            line.extend_from_slice(b",\"id\":");
            line.extend_from_slice(id.as_str().as_bytes());
        }
        line.push(b'}');
        // SAFETY: serde_json writes only valid UTF-8 (its own to_string
        // makes its String the same way); the rest is ASCII and the id's
        // text, a &str.
        unsafe { String::from_utf8_unchecked(line) }
    });
    finish_line(written)
}

/// Encodes an error reply line (with trailing newline).
pub fn encode_error(error: &CommandError, id: Option<&RequestId>) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        error: &'a CommandError,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a RequestId>,
    }
    finish_line(serde_json::to_string(&Line { error, id }))
}

/// Encodes an event line (with trailing newline).
pub fn encode_event<T: Serialize + ?Sized>(name: &str, data: &T, timestamp: Timestamp) -> String {
    #[derive(Serialize)]
    struct Line<'a, T: ?Sized> {
        event: &'a str,
        data: &'a T,
        timestamp: Timestamp,
    }
    finish_line(serde_json::to_string(&Line {
        event: name,
        data,
        timestamp,
    }))
}

/// The greeting written on accept.
#[derive(Debug, Clone, Serialize)]
pub struct Hello {
    pub protocol: u32,
    pub server: &'static str,
    pub version: &'static str,
    /// Which hypervisor backend the binary runs: "virt" or "wire".
    pub backend: &'static str,
    pub pid: u32,
    pub vmi: String,
    pub ready: bool,
    pub commands: Vec<&'static str>,
    pub max_line_bytes: usize,
}

pub fn encode_hello(hello: &Hello) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        hello: &'a Hello,
    }
    finish_line(serde_json::to_string(&Line { hello }))
}

fn finish_line(encoded: Result<String, serde_json::Error>) -> String {
    match encoded {
        Ok(mut line) => {
            line.push('\n');
            line
        }
        // Serialising maps of JSON values cannot fail; keep the wire
        // contract (one line per reply) even if it somehow does.
        Err(e) => format!(
            "{{\"error\":{{\"class\":\"Internal\",\"desc\":\"could not encode reply: {}\"}}}}\n",
            e.to_string().replace(['"', '\\'], "'")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_full_request_and_keeps_id_verbatim() {
        let req =
            parse_request(br#"{"execute":"sync","arguments":{"a":1},"id":{"x":[1,"y"]}}"#).unwrap();
        assert_eq!(req.execute, "sync");
        assert_eq!(req.arguments.get("a"), Some(&json!(1)));
        assert_eq!(req.id, Some(RequestId::from_value(&json!({"x":[1,"y"]}))));
    }

    #[test]
    fn number_ids_come_back_exactly_as_sent() {
        for (line, echoed) in [
            (r#"{"execute":"ping","id":-0}"#, "-0"),
            (r#"{"execute":"ping","id":1.50}"#, "1.50"),
            (
                r#"{"id": 12345678901234567890123 ,"execute":"ping"}"#,
                "12345678901234567890123",
            ),
            (r#"{"execute":"ping","id":1e3}"#, "1e3"),
            // Other values are re-encoded compactly.
            (
                r#"{"execute":"ping","id":{ "a" : [ 1 , true ] }}"#,
                r#"{"a":[1,true]}"#,
            ),
            (r#"{"execute":"ping","id":"x"}"#, r#""x""#),
            (r#"{"execute":"ping","id":null}"#, "null"),
        ] {
            let req = parse_request(line.as_bytes()).unwrap();
            let id = req.id.expect("id");
            assert_eq!(id.as_str(), echoed, "{line}");
            let reply = encode_return(&Return::new(), Some(&id));
            assert_eq!(reply, format!("{{\"return\":{{}},\"id\":{echoed}}}\n"));
        }
        // Kept for errors too.
        let err = parse_request(br#"{"execute":5,"id":-0}"#).unwrap_err();
        assert_eq!(err.id.map(|id| id.as_str().to_string()), Some("-0".into()));
    }

    #[test]
    fn the_one_pass_read_agrees_with_the_general_one() {
        let lines = [
            r#"{"execute":"ping"}"#,
            r#" {"execute":"ping","id":1}"#,
            r#"{"id":-2.5e3,"execute":"query-domain","arguments":{"cached":false}}"#,
            r#"{"execute":"sync","arguments":null,"id":null}"#,
            r#"{"execute":"sync","arguments":{"vmi":{"a":[1,{"b":null}]}},"id":"x\u0041"}"#,
            r#"{"execute":"ping","id":{ "a" : [ 1 , true ] }}"#,
            r#"{"execute":"ping","id":[1, "two"]}"#,
            r#"{"execute":"ping","id":true}"#,
            r#"{"execute":"ping","arguments":{"a":1,"a":2}}"#,
            "\t\r\n{\"execute\" : \"ping\" }  ",
        ];
        for line in lines {
            let plain = parse_plain_request(line).unwrap_or_else(|| panic!("not plain: {line}"));
            assert_eq!(Ok(plain), parse_request_value(line), "{line}");
        }
        // Lines the one-pass read leaves to the general one, which words
        // the error or, for a key given twice, takes the last.
        for line in [
            r#"{"execute":"ping","execute":"query-status"}"#,
            r#"{"execute":"ping","id":1,"id":2}"#,
            r#"["ping"]"#,
            r#"{"execute":"ping","extra":1}"#,
            r#"{"execute":5}"#,
            r#"{"execute":"ping","arguments":[1]}"#,
            r#"{"arguments":{}}"#,
            r#"{"execute":"ping"} x"#,
            r#"{"execute":"ping""#,
            r#""ping""#,
        ] {
            assert_eq!(parse_plain_request(line), None, "{line}");
        }
        let twice =
            parse_request(br#"{"execute":"ping","execute":"query-status","id":1,"id":2}"#).unwrap();
        assert_eq!(twice.execute, "query-status");
        assert_eq!(twice.id.as_ref().map(RequestId::as_str), Some("2"));
    }

    #[test]
    fn arguments_and_id_are_optional() {
        let req = parse_request(br#"{"execute":"ping"}"#).unwrap();
        assert!(req.arguments.is_empty());
        assert_eq!(req.id, None);
    }

    #[test]
    fn invalid_json_is_parse_error_without_id() {
        let err = parse_request(br#"{"execute":"ping","id":3"#).unwrap_err();
        assert_eq!(err.error.class, ErrorClass::ParseError);
        assert_eq!(err.id, None);
    }

    /// `{"execute":"pause",<member>}` with `member`'s value nested so that
    /// the whole line is `depth` levels deep.
    fn nested_line(member: &str, depth: usize) -> Vec<u8> {
        let inner = depth - 1;
        let value = format!("{}{}", "[".repeat(inner), "]".repeat(inner));
        let value = if member == "arguments" {
            // arguments must be an object: {"a":[[...]]}
            format!(
                "{{\"a\":{}{}}}",
                "[".repeat(inner - 1),
                "]".repeat(inner - 1)
            )
        } else {
            value
        };
        format!("{{\"execute\":\"pause\",\"{member}\":{value}}}").into_bytes()
    }

    #[test]
    fn a_line_nested_too_deep_is_a_parse_error_wherever_the_depth_is() {
        // Below the limit, an id is echoed and arguments are read.
        let id = parse_request(&nested_line("id", MAX_NESTING - 1)).unwrap();
        assert_eq!(id.id.map(|i| i.as_str().len()), Some(2 * (MAX_NESTING - 2)));
        parse_request(&nested_line("arguments", MAX_NESTING - 1)).unwrap();
        // At the limit and far beyond it, both are refused alike: the
        // command is not run, and the reply (no id) says why it has none
        // when the depth is in the id.
        for depth in [MAX_NESTING, MAX_NESTING + 1, 400_000] {
            let err = parse_request(&nested_line("id", depth)).unwrap_err();
            assert_eq!(err.error.class, ErrorClass::ParseError, "depth {depth}");
            assert_eq!(err.id, None);
            assert!(
                err.error.desc.starts_with(
                    "invalid JSON: recursion limit exceeded at line 1 column "
                ) && err.error.desc.ends_with(
                    "; the request's \"id\" is nested too deep to be echoed, so this reply has none"
                ),
                "{}",
                err.error.desc
            );
            let err = parse_request(&nested_line("arguments", depth)).unwrap_err();
            assert_eq!(err.error.class, ErrorClass::ParseError, "depth {depth}");
            assert!(
                err.error
                    .desc
                    .starts_with("invalid JSON: recursion limit exceeded")
                    && !err.error.desc.contains("\"id\""),
                "{}",
                err.error.desc
            );
        }
        // A top-level array that deep is not a request with an id.
        let array = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let err = parse_request(array.as_bytes()).unwrap_err();
        assert!(!err.error.desc.contains("\"id\""), "{}", err.error.desc);
    }

    #[test]
    fn nesting_depth_counts_brackets_outside_strings() {
        assert_eq!(nesting_depth("1"), 0);
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":[]}],"c":{}}"#), 4);
        assert_eq!(nesting_depth(r#"["[[[{\"]]",["\\"]]"#), 2);
    }

    #[test]
    fn invalid_utf8_is_parse_error() {
        let err = parse_request(b"{\"execute\":\"\xff\"}").unwrap_err();
        assert_eq!(err.error.class, ErrorClass::ParseError);
        assert!(err.error.desc.contains("UTF-8"));
    }

    #[test]
    fn envelope_errors_are_invalid_request_and_keep_id() {
        for (line, needle) in [
            (&br#"{"id":7}"#[..], "missing \"execute\""),
            (br#"{"execute":5,"id":7}"#, "must be a string"),
            (
                br#"{"execute":"ping","arguments":[1],"id":7}"#,
                "must be a JSON object",
            ),
            (
                br#"{"execute":"ping","extra":1,"id":7}"#,
                "unknown request key \"extra\"",
            ),
        ] {
            let err = parse_request(line).unwrap_err();
            assert_eq!(err.error.class, ErrorClass::InvalidRequest, "{needle}");
            assert!(err.error.desc.contains(needle), "{}", err.error.desc);
            assert_eq!(err.id.as_ref().map(RequestId::as_str), Some("7"));
        }
        let err = parse_request(b"[1,2]").unwrap_err();
        assert_eq!(err.error.class, ErrorClass::InvalidRequest);
    }

    #[test]
    fn replies_are_single_compact_lines() {
        let ret = Return::from(crate::replies::Executed {
            elapsed_seconds: 0.5,
            exit_code: None,
            pid: 1,
            signal: None,
            stderr: "c\nd".into(),
            stderr_truncated: false,
            stdout: String::new(),
            stdout_truncated: false,
        });
        let line = encode_return(&ret, Some(&RequestId::from_value(&json!("id-1"))));
        assert_eq!(
            line,
            "{\"return\":{\"elapsed_seconds\":0.5,\"exit_code\":null,\"pid\":1,\"signal\":null,\"stderr\":\"c\\nd\",\"stderr_truncated\":false,\"stdout\":\"\",\"stdout_truncated\":false},\"id\":\"id-1\"}\n"
        );
        assert_eq!(encode_return(&Return::new(), None), "{\"return\":{}}\n");
        let encoded = Return::from(crate::replies::StatsReply {
            age_ms: 3,
            domain: "d".into(),
            stats: Encoded::new(&json!({"x": [1, "y"]})),
        });
        assert_eq!(
            encode_return(
                &encoded,
                Some(&RequestId::from_value(&json!([1, {"k": "v"}])))
            ),
            "{\"return\":{\"age_ms\":3,\"domain\":\"d\",\"stats\":{\"x\":[1,\"y\"]}},\"id\":[1,{\"k\":\"v\"}]}\n"
        );
        let err =
            CommandError::new(ErrorClass::NotFound, "no domain").with_cause("virDomainLookup");
        assert_eq!(
            encode_error(&err, None),
            "{\"error\":{\"class\":\"NotFound\",\"desc\":\"no domain\",\"causes\":[\"virDomainLookup\"]}}\n"
        );
        let plain = CommandError::new(ErrorClass::Busy, "full");
        assert_eq!(
            encode_error(&plain, Some(&RequestId::from_value(&json!(1)))),
            "{\"error\":{\"class\":\"Busy\",\"desc\":\"full\"},\"id\":1}\n"
        );
    }

    #[test]
    fn event_line_shape() {
        let line = encode_event(
            "DOMAIN_LIFECYCLE",
            &json!({"event":"Started"}),
            Timestamp {
                seconds: 5,
                microseconds: 6,
            },
        );
        assert_eq!(
            line,
            "{\"event\":\"DOMAIN_LIFECYCLE\",\"data\":{\"event\":\"Started\"},\"timestamp\":{\"seconds\":5,\"microseconds\":6}}\n"
        );
    }

    #[test]
    fn error_class_names_are_stable() {
        let names: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "ParseError",
                "RequestTooLarge",
                "InvalidRequest",
                "CommandNotFound",
                "InvalidArgument",
                "InvalidState",
                "NotFound",
                "Unavailable",
                "Timeout",
                "Busy",
                "Internal"
            ]
        );
        for class in ErrorClass::ALL {
            assert_eq!(
                serde_json::to_value(class).unwrap(),
                Value::String(class.as_str().into())
            );
        }
    }
}
