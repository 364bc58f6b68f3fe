//! Logging to standard error through `log` and env_logger: `-v` for debug,
//! `-vv` for trace, `RUST_LOG` when set.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn init(verbosity: u8) {
    let default = match verbosity {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let mut builder = env_logger::Builder::new();
    builder.parse_filters(default);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    builder.format(|out, record| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let thread = std::thread::current();
        writeln!(
            out,
            "{}.{:06} {:<5} [{}] {}",
            now.as_secs(),
            now.subsec_micros(),
            record.level(),
            thread.name().unwrap_or("?"),
            record.args()
        )
    });
    // A second init (tests) keeps the first logger.
    let _ = builder.try_init();
}
