//! The virtio-serial side of the downward metrics (KubeVirt:
//! pkg/downwardmetrics/virtio-serial): QEMU listens on the channel's unix
//! socket and the launcher connects to it; a program in the guest opens
//! `/dev/virtio-ports/org.github.vhostmd.1`, writes `GET /metrics/XML`
//! and a blank line, and reads the page up to a blank line. Requests are
//! answered one at a time, at most one a second, as KubeVirt's server
//! answers them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

/// The answer to anything but `GET /metrics/XML`.
pub const INVALID_REQUEST: &str = "INVALID REQUEST\n\n";
/// The page when the metrics cannot be collected.
pub const EMPTY_METRICS: &str =
    "<metrics><!-- host metrics not available --><!-- VM metrics not available --></metrics>";
/// How often a request is answered at most (KubeVirt: one a second).
pub const MIN_REQUEST_GAP: Duration = Duration::from_secs(1);
/// A request line longer than this is not one (KubeVirt sets no limit;
/// one keeps a guest from making the launcher buffer without end).
const MAX_LINE: u64 = 4096;

/// One request as read from the channel.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics/XML`.
    Metrics,
    /// Anything else, with why.
    Invalid(String),
}

/// Reads one request: a request line and a blank line. `None` at the end
/// of the stream (QEMU closed the socket: the domain stopped).
pub fn read_request<R: BufRead>(reader: &mut R) -> io::Result<Option<Request>> {
    let Some(line) = read_line(reader)? else {
        return Ok(None);
    };
    let Some(blank) = read_line(reader)? else {
        return Ok(None);
    };
    let line = match line {
        Ok(line) => line,
        Err(why) => return Ok(Some(Request::Invalid(why))),
    };
    match blank {
        Ok(blank) if blank.is_empty() => Ok(Some(parse_request(&line))),
        Ok(_) => Ok(Some(Request::Invalid(
            "malformed request missing blank line".to_string(),
        ))),
        Err(why) => Ok(Some(Request::Invalid(why))),
    }
}

/// One line without its `\n` or `\r\n`; an inner error (too long, not
/// UTF-8) is the request's fault, not the stream's.
fn read_line<R: BufRead>(reader: &mut R) -> io::Result<Option<Result<String, String>>> {
    let mut bytes = Vec::new();
    let read = reader
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut bytes)?;
    if read == 0 {
        return Ok(None);
    }
    if bytes.last() != Some(&b'\n') {
        if read as u64 >= MAX_LINE {
            return Ok(Some(Err(format!("a line longer than {MAX_LINE} bytes"))));
        }
        // The stream ended inside a line.
        return Ok(None);
    }
    bytes.pop();
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    Ok(Some(
        String::from_utf8(bytes).map_err(|_| "a line that is not UTF-8".to_string()),
    ))
}

/// `GET <uri>` whose path is `/metrics/XML` (Go's `url.ParseRequestURI`:
/// an absolute path, or an absolute URL, with any query).
fn parse_request(line: &str) -> Request {
    let Some((method, uri)) = line.split_once(' ') else {
        return Request::Invalid(format!("malformed request: {line:?}"));
    };
    if method != "GET" {
        return Request::Invalid(format!("invalid method: {method:?}"));
    }
    let without_query = uri.split(['?', '#']).next().unwrap_or_default();
    let path = match without_query.split_once("://") {
        Some((scheme, rest)) if !scheme.is_empty() && !scheme.contains('/') => {
            rest.find('/').map_or("", |at| &rest[at..])
        }
        _ => without_query,
    };
    if path == "/metrics/XML" {
        Request::Metrics
    } else {
        Request::Invalid(format!("invalid request: {path:?}"))
    }
}

/// The answer to a metrics request: the page (or [`EMPTY_METRICS`]) and
/// the blank line `vm-dump-metrics` reads up to.
pub fn metrics_answer(page: Option<&str>) -> Vec<u8> {
    let mut answer = page.unwrap_or(EMPTY_METRICS).as_bytes().to_vec();
    answer.extend_from_slice(b"\n\n");
    answer
}

/// Serves requests on `stream` until it ends: each metrics request gets
/// `page()`'s page, anything else [`INVALID_REQUEST`]; one request is
/// read at a time, at most one every `gap`.
pub fn serve<S: Read + Write>(
    stream: S,
    gap: Duration,
    mut page: impl FnMut() -> Option<String>,
) -> io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut next_read = Instant::now();
    loop {
        let now = Instant::now();
        if next_read > now {
            std::thread::sleep(next_read - now);
        }
        next_read = Instant::now() + gap;
        let answer = match read_request(&mut reader)? {
            None => return Ok(()),
            Some(Request::Metrics) => metrics_answer(page().as_deref()),
            Some(Request::Invalid(why)) => {
                log::warn!("metrics channel: {why}");
                // What is left of the bad request would spoil the next.
                let buffered = reader.buffer().len();
                reader.consume(buffered);
                INVALID_REQUEST.as_bytes().to_vec()
            }
        };
        reader.get_mut().write_all(&answer)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn request(text: &str) -> Option<Request> {
        read_request(&mut text.as_bytes()).unwrap()
    }

    #[test]
    fn requests_are_parsed_as_kubevirt_parses_them() {
        assert_eq!(request("GET /metrics/XML\n\n"), Some(Request::Metrics));
        assert_eq!(request("GET /metrics/XML\r\n\r\n"), Some(Request::Metrics));
        assert_eq!(request("GET /metrics/XML?x=1\n\n"), Some(Request::Metrics));
        assert_eq!(
            request("GET http://host/metrics/XML\n\n"),
            Some(Request::Metrics)
        );
        for bad in [
            "POST /metrics/XML\n\n",
            "GET /metrics/xml\n\n",
            "GET\n\n",
            "GET /metrics/XML\nX\n",
        ] {
            assert!(matches!(request(bad), Some(Request::Invalid(_))), "{bad:?}");
        }
        assert_eq!(request(""), None);
        assert_eq!(request("GET /metrics/XML\n"), None);
        let long = format!("GET /{}\n\n", "a".repeat(5000));
        assert!(matches!(request(&long), Some(Request::Invalid(_))));
    }

    /// As `vm-dump-metrics` talks to the port: a request, then the answer
    /// up to the blank line; a bad request gets KubeVirt's answer and the
    /// next good one its page.
    #[test]
    fn a_guest_gets_the_page_then_invalid_then_the_page() {
        let (guest, host) = UnixStream::pair().unwrap();
        let mut count = 0;
        let server = std::thread::spawn(move || {
            serve(host, Duration::ZERO, || {
                count += 1;
                Some(format!("<metrics>{count}</metrics>"))
            })
        });
        let mut reader = BufReader::new(guest.try_clone().unwrap());
        let mut ask = |request: &str| {
            (&guest).write_all(request.as_bytes()).unwrap();
            let mut answer = String::new();
            while !answer.ends_with("\n\n") {
                let mut line = String::new();
                assert!(reader.read_line(&mut line).unwrap() > 0, "{answer:?}");
                answer.push_str(&line);
            }
            answer
        };
        assert_eq!(ask("GET /metrics/XML\n\n"), "<metrics>1</metrics>\n\n");
        assert_eq!(ask("PUT /metrics/XML\n\n"), INVALID_REQUEST);
        assert_eq!(ask("GET /metrics/XML\n\n"), "<metrics>2</metrics>\n\n");
        drop(guest);
        drop(reader);
        server.join().unwrap().unwrap();
    }

    #[test]
    fn without_metrics_the_answer_says_so() {
        assert_eq!(
            String::from_utf8(metrics_answer(None)).unwrap(),
            format!("{EMPTY_METRICS}\n\n")
        );
    }

    #[test]
    fn requests_are_answered_at_most_once_per_gap() {
        let (guest, host) = UnixStream::pair().unwrap();
        let gap = Duration::from_millis(300);
        let server = std::thread::spawn(move || serve(host, gap, || Some("<m/>".into())));
        let started = Instant::now();
        (&guest)
            .write_all(b"GET /metrics/XML\n\nGET /metrics/XML\n\n")
            .unwrap();
        let mut reader = BufReader::new(&guest);
        let mut lines = Vec::new();
        for _ in 0..4 {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            lines.push(line);
        }
        assert_eq!(lines, ["<m/>\n", "\n", "<m/>\n", "\n"]);
        assert!(started.elapsed() >= gap, "{:?}", started.elapsed());
        drop(reader);
        drop(guest);
        server.join().unwrap().unwrap();
    }
}
