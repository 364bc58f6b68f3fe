//! One connection to a launcher's command socket, every step bounded by a
//! deadline: the connect (on a thread of its own, since a Unix-socket
//! connect blocks while the listener's backlog is full), the greeting,
//! each request, each reply. A launcher that is gone fails at once; one
//! that is wedged fails when the deadline passes.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::ClientError;
use crate::protocol::PROTOCOL_VERSION;

/// Longest line accepted from the launcher (a domain XML in a reply can be
/// large; nothing real comes near this).
const MAX_LINE_BYTES: usize = 64 << 20;

/// One line from the launcher: its exact text (without the newline) and
/// its JSON.
#[derive(Debug, Clone)]
pub struct Line {
    pub raw: String,
    pub value: Value,
}

/// The answer to a request.
#[derive(Debug, Clone)]
pub enum Reply {
    Return {
        value: Map<String, Value>,
        line: Line,
    },
    Error {
        error: RemoteError,
        line: Line,
    },
}

/// An error the launcher answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteError {
    pub class: String,
    pub desc: String,
    pub causes: Vec<String>,
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class, self.desc)?;
        for cause in &self.causes {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

impl RemoteError {
    fn from_value(error: &Value) -> RemoteError {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or("");
        RemoteError {
            class: text("class").to_string(),
            desc: text("desc").to_string(),
            causes: error
                .get("causes")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

pub struct Connection {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// The greeting's `hello` object.
    pub hello: Value,
    next_id: u64,
}

impl Connection {
    /// Connects to `path` and reads the greeting, both before `deadline`.
    pub fn open(path: &Path, deadline: Instant) -> Result<Connection, ClientError> {
        let stream = connect(path, deadline)?;
        let writer = stream
            .try_clone()
            .map_err(|e| ClientError::io("use", path, e))?;
        let mut connection = Connection {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(64 * 1024, stream),
            writer,
            hello: Value::Null,
            next_id: 1,
        };
        let line = connection
            .read_line(Some(deadline))
            .map_err(|e| e.waiting_for("the greeting"))?
            .ok_or_else(|| ClientError::Closed {
                path: path.to_path_buf(),
                waiting_for: "the greeting",
            })?;
        if let Some(error) = line.value.get("error") {
            // A launcher at --max-clients answers Busy instead of greeting.
            return Err(ClientError::Refused {
                path: path.to_path_buf(),
                error: RemoteError::from_value(error),
            });
        }
        let Some(hello) = line.value.get("hello") else {
            return Err(ClientError::NotALauncher {
                path: path.to_path_buf(),
                line: line.raw,
            });
        };
        let protocol = hello.get("protocol").and_then(Value::as_u64);
        if protocol != Some(u64::from(PROTOCOL_VERSION)) {
            return Err(ClientError::Protocol {
                path: path.to_path_buf(),
                got: hello.get("protocol").cloned().unwrap_or(Value::Null),
            });
        }
        connection.hello = hello.clone();
        Ok(connection)
    }

    /// Sends one request and waits until `deadline` for its reply; events
    /// that arrive meanwhile are skipped.
    pub fn request(
        &mut self,
        execute: &str,
        arguments: Option<Map<String, Value>>,
        deadline: Option<Instant>,
    ) -> Result<Reply, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = json!({"execute": execute, "id": id});
        if let Some(arguments) = arguments {
            request["arguments"] = Value::Object(arguments);
        }
        let mut bytes = request.to_string().into_bytes();
        bytes.push(b'\n');
        self.write_all(&bytes, deadline)?;
        loop {
            let line = self
                .read_line(deadline)
                .map_err(|e| e.waiting_for("the reply"))?
                .ok_or_else(|| ClientError::Closed {
                    path: self.path.clone(),
                    waiting_for: "the reply",
                })?;
            if line.value.get("id") != Some(&json!(id)) {
                // An event, or a line that is not ours.
                continue;
            }
            if let Some(Value::Object(value)) = line.value.get("return") {
                return Ok(Reply::Return {
                    value: value.clone(),
                    line,
                });
            }
            if let Some(error) = line.value.get("error") {
                return Ok(Reply::Error {
                    error: RemoteError::from_value(error),
                    line,
                });
            }
            return Err(ClientError::NotALauncher {
                path: self.path.clone(),
                line: line.raw,
            });
        }
    }

    /// The next line, waiting until `deadline` (`None`: as long as it
    /// takes); `None` when the launcher closed the connection.
    pub fn read_line(&mut self, deadline: Option<Instant>) -> Result<Option<Line>, ClientError> {
        let mut bytes = Vec::new();
        loop {
            let timeout = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ClientError::TimedOut {
                            path: self.path.clone(),
                            waiting_for: "",
                        });
                    }
                    Some(left)
                }
                None => None,
            };
            self.reader
                .get_ref()
                .set_read_timeout(timeout)
                .map_err(|e| ClientError::io("read from", &self.path, e))?;
            let available = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => {
                    return Err(ClientError::TimedOut {
                        path: self.path.clone(),
                        waiting_for: "",
                    });
                }
                Err(e) => return Err(ClientError::io("read from", &self.path, e)),
            };
            if available.is_empty() {
                if bytes.is_empty() {
                    return Ok(None);
                }
                break;
            }
            let (consumed, done) = match available.iter().position(|&b| b == b'\n') {
                Some(pos) => {
                    bytes.extend_from_slice(&available[..pos]);
                    (pos + 1, true)
                }
                None => {
                    bytes.extend_from_slice(available);
                    (available.len(), false)
                }
            };
            self.reader.consume(consumed);
            if bytes.len() > MAX_LINE_BYTES {
                return Err(ClientError::NotALauncher {
                    path: self.path.clone(),
                    line: format!("a line of more than {MAX_LINE_BYTES} bytes"),
                });
            }
            if done {
                break;
            }
        }
        let raw = String::from_utf8(bytes).map_err(|_| ClientError::NotALauncher {
            path: self.path.clone(),
            line: "a line that is not UTF-8".into(),
        })?;
        let value = serde_json::from_str(&raw).map_err(|_| ClientError::NotALauncher {
            path: self.path.clone(),
            line: raw.clone(),
        })?;
        Ok(Some(Line { raw, value }))
    }

    fn write_all(
        &mut self,
        mut bytes: &[u8],
        deadline: Option<Instant>,
    ) -> Result<(), ClientError> {
        while !bytes.is_empty() {
            let timeout = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ClientError::TimedOut {
                            path: self.path.clone(),
                            waiting_for: "the launcher to read the request",
                        });
                    }
                    Some(left)
                }
                None => None,
            };
            self.writer
                .set_write_timeout(timeout)
                .map_err(|e| ClientError::io("write to", &self.path, e))?;
            match self.writer.write(bytes) {
                Ok(0) => {
                    return Err(ClientError::Closed {
                        path: self.path.clone(),
                        waiting_for: "the request to be read",
                    });
                }
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    return Err(ClientError::TimedOut {
                        path: self.path.clone(),
                        waiting_for: "the launcher to read the request",
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    return Err(ClientError::Closed {
                        path: self.path.clone(),
                        waiting_for: "the request to be read",
                    });
                }
                Err(e) => return Err(ClientError::io("write to", &self.path, e)),
            }
        }
        Ok(())
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Connects on a helper thread, so that a listener whose backlog is full
/// (a launcher that stopped accepting) cannot hold the caller past
/// `deadline`. A connect still blocked then is abandoned with its thread;
/// the subcommand exits soon after.
fn connect(path: &Path, deadline: Instant) -> Result<UnixStream, ClientError> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let target = path.to_path_buf();
    std::thread::Builder::new()
        .name("connect".into())
        .spawn(move || {
            let _ = tx.send(UnixStream::connect(&target));
        })
        .map_err(|e| ClientError::io("connect to", path, e))?;
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left.max(Duration::from_millis(1))) {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(ClientError::connect(path, e)),
        Err(_) => Err(ClientError::TimedOut {
            path: path.to_path_buf(),
            waiting_for: "the connection to be accepted",
        }),
    }
}
