//! The glob dialect of the config file's `allow` and `deny` lists, shared by
//! config validation, per-upstream shaping in the catalog and the policy, so
//! each of them compiles a pattern the same way. A leaf: it imports nothing
//! of the crate.

use globset::{Glob, GlobBuilder};

/// A name or URI glob: `*` and `?` match any characters, `/` included;
/// `[...]` and `{a,b}` as usual; `\` escapes. Case-sensitive.
pub(crate) fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}
