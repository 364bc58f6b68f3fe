//! Scratch directories for unit tests. Each is unique to the process and
//! the call, and is removed when dropped, so a test run leaves nothing
//! behind in the temp dir (and two tests never share one).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the temp dir, removed with everything in it on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `vl-TAG-PID-N` under the temp dir; `tag` names the test in
    /// a listing of what a crashed run left.
    pub fn new(tag: &str) -> ScratchDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("vl-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        if let Err(e) = fs::create_dir_all(&dir) {
            panic!("cannot create scratch dir {}: {e}", dir.display());
        }
        ScratchDir(dir)
    }
}

/// A scratch dir is used as the path it is: `dir.join(..)`, `&dir` where a
/// `&Path` goes, `fs::*(&dir)`.
impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_is_unique_and_gone_after_drop() {
        let a = ScratchDir::new("scratch");
        let b = ScratchDir::new("scratch");
        assert_ne!(&*a, &*b);
        fs::create_dir_all(a.join("x/y")).unwrap();
        fs::write(a.join("x/y/z"), b"data").unwrap();
        let kept = a.to_path_buf();
        drop(a);
        assert!(!kept.exists(), "{} is still there", kept.display());
        assert!(b.is_dir());
    }
}
