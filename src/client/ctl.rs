//! `ctl`: one command and its reply, the command list, or the event
//! stream, printed for a person (indented JSON on a terminal) or a
//! program (one line per value; `--raw`: the launcher's own lines).

use std::io::{self, IsTerminal, Write};

use serde_json::{Map, Value, json};

use super::connection::{Connection, Line, RemoteError, Reply};
use super::fail;
use crate::cli::{ClientTarget, CtlRequest};

pub fn run(target: &ClientTarget, raw: bool, request: CtlRequest) -> i32 {
    let deadline = crate::limits::deadline_in(target.timeout);
    let mut connection = match Connection::open(&target.socket, deadline) {
        Ok(c) => c,
        Err(e) => return fail("ctl", e.message(target.timeout)),
    };
    let out = Output {
        raw,
        pretty: io::stdout().is_terminal(),
    };
    match request {
        CtlRequest::Command { execute, arguments } => {
            let arguments = (!arguments.is_empty()).then_some(arguments);
            match connection.request(&execute, arguments, Some(deadline)) {
                Ok(Reply::Return { value, line }) => {
                    out.value(&Value::Object(value), &line);
                    0
                }
                Ok(Reply::Error { error, line }) => {
                    if raw {
                        out.line(&line.raw);
                        1
                    } else {
                        fail("ctl", failure(&execute, &error))
                    }
                }
                Err(e) => fail("ctl", e.message(target.timeout)),
            }
        }
        CtlRequest::ListCommands => {
            match connection.request("query-commands", None, Some(deadline)) {
                Ok(Reply::Return { value, line }) => {
                    if raw {
                        out.line(&line.raw);
                    } else {
                        out.line(&command_list(&value));
                    }
                    0
                }
                Ok(Reply::Error { error, .. }) => fail("ctl", failure("query-commands", &error)),
                Err(e) => fail("ctl", e.message(target.timeout)),
            }
        }
        CtlRequest::Events { names } => {
            let arguments = (!names.is_empty()).then(|| {
                let mut map = Map::new();
                map.insert("events".into(), json!(names));
                map
            });
            match connection.request("subscribe", arguments, Some(deadline)) {
                Ok(Reply::Return { .. }) => follow(&mut connection, &out),
                Ok(Reply::Error { error, .. }) => fail("ctl", failure("subscribe", &error)),
                Err(e) => fail("ctl", e.message(target.timeout)),
            }
        }
    }
}

/// Prints every event until the launcher closes the connection (or the
/// reader of our output goes away); returns the exit status.
fn follow(connection: &mut Connection, out: &Output) -> i32 {
    loop {
        match connection.read_line(None) {
            Ok(Some(line)) => {
                if line.value.get("event").is_some() && !out.value(&line.value, &line) {
                    return 0;
                }
            }
            Ok(None) => {
                eprintln!("virt-launcher ctl: the launcher closed the connection");
                return 0;
            }
            Err(e) => return fail("ctl", e),
        }
    }
}

/// The error a command got, named once: most descriptions already start
/// with the command's name.
fn failure(execute: &str, error: &RemoteError) -> String {
    if error.desc.starts_with(&format!("{execute}:")) {
        error.to_string()
    } else {
        format!("{execute}: {error}")
    }
}

/// `NAME  summary` per command, names aligned.
fn command_list(value: &Map<String, Value>) -> String {
    let commands: Vec<(&str, &str)> = value
        .get("commands")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|c| {
                    (
                        c.get("name").and_then(Value::as_str).unwrap_or(""),
                        c.get("summary").and_then(Value::as_str).unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let width = commands.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    commands
        .iter()
        .map(|(name, summary)| format!("{name:<width$}  {summary}"))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Output {
    raw: bool,
    pretty: bool,
}

impl Output {
    /// Prints a value: the launcher's line with `--raw`, else the value,
    /// indented on a terminal. False when standard output is closed.
    fn value(&self, value: &Value, line: &Line) -> bool {
        if self.raw {
            return self.line(&line.raw);
        }
        let text = if self.pretty {
            serde_json::to_string_pretty(value)
        } else {
            serde_json::to_string(value)
        };
        match text {
            Ok(text) => self.line(&text),
            Err(_) => self.line(&line.raw),
        }
    }

    /// One line on standard output; false when it cannot be written (a
    /// closed pipe: `ctl --events | head`), which is not worth a panic.
    fn line(&self, text: &str) -> bool {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_command_once() {
        let error = |desc: &str| RemoteError {
            class: "InvalidState".into(),
            desc: desc.into(),
            causes: vec!["root".into()],
        };
        assert_eq!(
            failure("pause", &error("pause: the domain must be running")),
            "InvalidState: pause: the domain must be running: root"
        );
        assert_eq!(
            failure("frob", &error("unknown command \"frob\"")),
            "frob: InvalidState: unknown command \"frob\": root"
        );
    }

    #[test]
    fn the_command_list_aligns_names() {
        let value = json!({"commands": [
            {"name": "ping", "summary": "Answers {}."},
            {"name": "query-status", "summary": "The phase."}
        ]});
        assert_eq!(
            command_list(value.as_object().unwrap()),
            "ping          Answers {}.\nquery-status  The phase."
        );
    }
}
