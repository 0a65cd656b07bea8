//! `serve --config FILE`: a TOML file of serve settings, the lowest source
//! of each setting: flags > environment > file > defaults.
//!
//! Every key is the name of a `serve` setting's environment variable
//! without `LEASEHOLD_`, in lower case (`LEASEHOLD_TICK_MS` is `tick_ms`), so
//! the flags, the variables and the file can never disagree on what exists:
//! the known keys are read off the clap definition of `serve`. The file is
//! applied before the command line is parsed, by setting the variable of
//! each key the environment does not set already; clap then gives flags
//! precedence over both as usual.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Command};

use super::server::ServeArgs;

/// Prefix of every serve setting's environment variable.
const ENV_PREFIX: &str = "LEASEHOLD_";
/// The variable naming the file itself (not a key of the file).
const CONFIG_ENV: &str = "LEASEHOLD_CONFIG";

/// If `args` run `serve` with `--config FILE` (or `$LEASEHOLD_CONFIG` is
/// set), sets the environment variable of every key of FILE that the
/// environment lacks. Runs before the runtime starts, while this process
/// has one thread.
pub fn apply(args: &[OsString]) -> Result<()> {
    if args.get(1).and_then(|a| a.to_str()) != Some("serve") {
        return Ok(());
    }
    let Some(file) = config_arg(&args[2..]).or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from)) else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading --config {}", file.display()))?;
    for (var, value) in settings(&file, &text)? {
        if std::env::var_os(&var).is_none() {
            std::env::set_var(&var, value);
        }
    }
    Ok(())
}

/// The value of `--config FILE` or `--config=FILE` among serve's arguments.
fn config_arg(args: &[OsString]) -> Option<PathBuf> {
    let mut args = args.iter().map_while(|a| a.to_str()).take_while(|a| *a != "--");
    while let Some(arg) = args.next() {
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(file) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(file));
        }
    }
    None
}

/// `(environment variable, value)` of every key of the TOML `text`.
fn settings(file: &Path, text: &str) -> Result<BTreeMap<String, String>> {
    let table: toml::Table = toml::from_str(text).with_context(|| format!("{} is not valid TOML", file.display()))?;
    let known = known_keys();
    let mut settings = BTreeMap::new();
    for (key, value) in table {
        let Some(var) = known.get(&key) else {
            bail!(
                "{}: unknown key `{key}`; the keys are: {}",
                file.display(),
                known.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            // A list setting (`peers`) takes comma-separated values.
            toml::Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    toml::Value::String(s) => Ok(s),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    other => bail!("{}: `{key}` lists a {}; give strings", file.display(), other.type_str()),
                })
                .collect::<Result<Vec<_>>>()?
                .join(","),
            other => bail!("{}: `{key}` is a {}; give a string or a number", file.display(), other.type_str()),
        };
        settings.insert(var.clone(), value);
    }
    Ok(settings)
}

/// key → environment variable, for every `serve` setting that has one.
fn known_keys() -> BTreeMap<String, String> {
    ServeArgs::augment_args(Command::new("serve"))
        .get_arguments()
        .filter_map(|arg| arg.get_env()?.to_str())
        .filter(|var| *var != CONFIG_ENV)
        .filter_map(|var| Some((var.strip_prefix(ENV_PREFIX)?.to_lowercase(), var.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures every kind of value becomes the variable clap reads, lists
    // comma-joined.
    #[test]
    fn keys_become_their_variables() {
        let text = "id = 2\naddr = \"10.0.0.2:7701\"\npeers = [\"1=10.0.0.1:7701\", \"2=10.0.0.2:7701\"]\n";
        let settings = settings(Path::new("leasehold.toml"), text).unwrap();
        assert_eq!(settings["LEASEHOLD_ID"], "2");
        assert_eq!(settings["LEASEHOLD_ADDR"], "10.0.0.2:7701");
        assert_eq!(settings["LEASEHOLD_PEERS"], "1=10.0.0.1:7701,2=10.0.0.2:7701");
    }

    // Ensures a misspelt key, a table and the file's own variable are
    // refused, naming the key.
    #[test]
    fn unknown_keys_and_shapes_are_refused() {
        let file = Path::new("leasehold.toml");
        let err = settings(file, "tick_msec = 100\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `tick_msec`") && err.contains("tick_ms"), "{err}");
        let err = settings(file, "config = \"other.toml\"\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `config`"), "{err}");
        let err = settings(file, "[id]\nvalue = 1\n").unwrap_err().to_string();
        assert!(err.contains("`id` is a table"), "{err}");
        assert!(settings(file, "id = \n").unwrap_err().to_string().contains("not valid TOML"));
    }

    // Ensures docs/configuration.md's table lists every setting, so a flag
    // added to `serve` cannot go undocumented there.
    #[test]
    fn every_setting_is_in_the_reference_table() {
        let doc = include_str!("../../docs/configuration.md");
        for (key, var) in known_keys() {
            assert!(doc.contains(&format!("| `{var}` | `{key}` |")), "docs/configuration.md lacks {var} / {key}");
        }
    }

    // Ensures --config is found in both spellings, and not after `--`.
    #[test]
    fn config_flag_spellings() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(config_arg(&args(&["--id", "1", "--config", "a.toml"])), Some("a.toml".into()));
        assert_eq!(config_arg(&args(&["--config=b.toml"])), Some("b.toml".into()));
        assert_eq!(config_arg(&args(&["--", "--config", "c.toml"])), None);
    }
}
