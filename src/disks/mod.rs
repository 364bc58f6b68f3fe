//! Everything a sync does to the filesystem for a VMI's disks.
//!
//! The converter (`crate::convert`) is pure: it returns a [`DiskPlan`], an
//! ordered list of [`DiskStep`]s. [`prepare`] executes it: first every
//! [`DiskStep::RequireExisting`] check (so a missing image fails before
//! anything is created), then the creations in order. On failure it removes
//! what it created and returns a [`DiskError`]; after a successful prepare,
//! [`PreparedDisks::rollback`] undoes it if a later step (defining the domain)
//! fails. Files that already existed are never removed.

mod cache;
pub mod iso9660;
mod plan;
mod prepare;
mod qemu_img;

pub use cache::{HostProbe, ImageProbe, set_cache_modes};
pub use plan::{DiskPlan, DiskStep, IsoContents, PathKind, SecretFile};
pub use prepare::{
    DiskError, DiskErrorKind, PrepareOptions, PreparedDisks, iso_files, prepare, prepare_with,
};

#[cfg(test)]
mod test_plans;
#[cfg(test)]
mod tests;
