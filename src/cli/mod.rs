//! Command-line flags, in the shape of ripgrep's `flags/`:
//!
//! - `defs.rs`: the flag table, `FLAGS`, the single source of truth, and
//!   the `Args` it fills;
//! - `parse.rs`: the argument parser (`parse`) and its `UsageError`;
//! - `values.rs`: the value syntaxes (DURATION, BYTES, log filters, ...);
//! - `help.rs`: `--help`;
//! - `man.rs`: the man page (`--generate-man`);
//! - `subcommands.rs`: the client subcommands (`probe`, `freeze`,
//!   `unfreeze`, `ctl`): their flags, parsing, help and man text.
//!
//! Parsing has no side effects; resolving the identity from a `--vmi` file
//! and checking paths happens later, in `config`.

mod defs;
mod help;
pub mod man;
mod parse;
pub mod subcommands;
pub mod values;

pub use defs::{
    Args, FLAGS, FlagKind, FlagSpec, KubevirtArgs, PodNetworkMode, klog_verbosity, parse_klog_level,
};
pub use help::help_text;
pub use parse::{Action, UsageError, parse};
pub use subcommands::{ClientTarget, CtlRequest, Subcommand};
