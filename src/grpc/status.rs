//! gRPC status codes and messages, and how they travel in trailers:
//! `grpc-status` as a decimal number, `grpc-message` percent-encoded.

use std::fmt;

/// gRPC's status codes (grpc/doc/statuscodes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

impl Code {
    /// The code a number stands for; numbers gRPC does not define read as
    /// `Unknown`, as grpc-go reads them.
    pub fn from_number(n: u32) -> Code {
        usize::try_from(n)
            .ok()
            .and_then(|i| CODES.get(i))
            .copied()
            .unwrap_or(Code::Unknown)
    }

    pub fn number(self) -> u32 {
        self as u32
    }
}

/// A call's outcome other than success: what the server puts in its
/// trailers and the client reads from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }

    /// What a server answers for a method it does not have (grpc-go's
    /// wording).
    pub fn unimplemented(method: &str) -> Status {
        Status::new(Code::Unimplemented, format!("unknown method {method}"))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rpc error: code = {:?} desc = {}",
            self.code, self.message
        )
    }
}

/// `grpc-message`'s encoding: printable ASCII but `%` as it is, every
/// other octet of the UTF-8 text as `%XX`.
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads `grpc-message`; a `%` not followed by two hex digits is kept as
/// it is, as grpc-go keeps it.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .filter(|_| bytes[i] == b'%')
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_number() {
        assert_eq!(Code::from_number(0), Code::Ok);
        assert_eq!(Code::from_number(12), Code::Unimplemented);
        assert_eq!(Code::from_number(16), Code::Unauthenticated);
        assert_eq!(Code::from_number(17), Code::Unknown);
        assert_eq!(Code::from_number(u32::MAX), Code::Unknown);
        assert_eq!(Code::ResourceExhausted.number(), 8);
    }

    #[test]
    fn messages_survive_percent_encoding() {
        let message = "100% sure: grüße\nnext line";
        let encoded = percent_encode(message);
        assert_eq!(encoded, "100%25 sure: gr%C3%BC%C3%9Fe%0Anext line");
        assert_eq!(percent_decode(&encoded), message);
        // Stray percents stay as they are.
        assert_eq!(percent_decode("50% off %zz %4"), "50% off %zz %4");
    }
}
