//! A line diff for the tests that regenerate a checked-in file
//! (`UPDATE_GOLDEN`, `UPDATE_MAN`): such a run writes the new file, prints
//! what changed and fails, so that every regenerated file is a change
//! someone reviewed. Also compiled into the man page's unit test
//! (src/cli/man.rs), which must run no program.

/// The lines of `new` that differ from `old`, as `-` and `+` lines with
/// their line numbers (a shortest edit by the longest common subsequence
/// of lines); empty when the texts have the same lines.
pub fn line_diff(old: &str, new: &str) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    // common[i][j]: the longest common subsequence of old[i..] and new[j..].
    let mut common = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            common[i][j] = if old[i] == new[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let mut out = String::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            i += 1;
            j += 1;
        } else if i < old.len() && (j == new.len() || common[i + 1][j] >= common[i][j + 1]) {
            out.push_str(&format!("-{:>5}: {}\n", i + 1, old[i]));
            i += 1;
        } else {
            out.push_str(&format!("+{:>5}: {}\n", j + 1, new[j]));
            j += 1;
        }
    }
    out
}
