//! Records the git commit the binary is built from (`leasehold --version`,
//! `/v1/cluster/status`, `leasehold_build_info`) as `LEASEHOLD_COMMIT`.
//! `$LEASEHOLD_COMMIT` at build time wins (a packager who knows it); else
//! `git rev-parse --short HEAD` of this source tree; else "unknown" (a
//! tarball without .git, or no git installed).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LEASEHOLD_COMMIT");
    let commit = std::env::var("LEASEHOLD_COMMIT").ok().filter(|c| !c.is_empty()).or_else(git_commit);
    println!("cargo:rustc-env=LEASEHOLD_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}

/// HEAD's short hash, if this crate's folder is the top of a git work tree
/// (not merely inside some other repository, as an unpacked tarball may be).
fn git_commit() -> Option<String> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").arg("-C").arg(&manifest_dir).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != Path::new(&manifest_dir).canonicalize().ok()? {
        return None;
    }
    // Build again when HEAD moves (a commit, a checkout, a rebase). Only
    // files that exist: cargo reruns this on every build for a missing one.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            let file = Path::new(&top).join(file);
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
    git(&["rev-parse", "--short", "HEAD"])
}
