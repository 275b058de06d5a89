//! The TOML settings file (`--config`): its keys are the flags' names without the dashes in
//! front (`lane-size = 8`, and `[console]` and `[egress]` tables for the `--console-…` and
//! `--egress-…` flags without that prefix); the snake_case spelling earlier files used (`lane_size`) is read too, and a key given
//! both ways is refused as a duplicate. `sluice.example.toml` at the repository root lists every
//! setting with its default.
//!
//! The admin token is never read from a file: a secret in a file that is copied around and
//! checked in is a leak waiting to happen; it comes from `SLUICE_ADMIN_TOKEN` (or the flag).

use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::{ConfigError, RawSettings};

/// Read and parse the settings file at `path`; a problem names the file, the line and the key.
pub fn read(path: &Path) -> Result<RawSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(vec![format!(
            "cannot read the settings file {}: {e}",
            path.display()
        )])
    })?;
    parse(&text).map_err(|e| ConfigError(vec![format!("{}: {e}", path.display())]))
}

/// Parse settings from TOML text.
pub fn parse(text: &str) -> Result<RawSettings, toml::de::Error> {
    toml::from_str(text)
}

/// The deserializer of an `admin-token` key: always an error that says where the token goes.
pub(super) fn refuse_admin_token<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    let _ = toml::Value::deserialize(d)?;
    Err(serde::de::Error::custom(
        "admin-token is not read from the settings file (a secret does not belong in a file \
         that is copied and checked in): set SLUICE_ADMIN_TOKEN in the environment instead, \
         or pass --admin-token",
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    const EXAMPLE: &str = include_str!("../../sluice.example.toml");

    /// The long names of `sluice serve`'s settings flags (not `--config` or `--admin-token`,
    /// which the file cannot hold).
    fn serve_flags() -> BTreeSet<String> {
        let cli = Cli::command();
        let serve = cli
            .get_subcommands()
            .find(|c| c.get_name() == "serve")
            .expect("serve");
        serve
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .filter(|f| f != "config" && f != "admin-token")
            .collect()
    }

    /// The example file's keys, set or commented out (`# key = …`: no default), spelled as
    /// flags (`[console] link-ttl` is `console-link-ttl`).
    fn example_keys() -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        let mut prefix = "";
        for line in EXAMPLE.lines() {
            let line = line.trim();
            if let Some(table) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                prefix = match table {
                    "console" => "console-",
                    "egress" => "egress-",
                    // The tracing flags keep the OpenTelemetry names: the keys are the flags.
                    "traces" => "",
                    other => panic!("unexpected table [{other}]"),
                };
                continue;
            }
            let setting = line.strip_prefix("# ").unwrap_or(line);
            if let Some((key, _)) = setting.split_once(" = ")
                && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            {
                keys.insert(format!("{prefix}{key}"));
            }
        }
        keys
    }

    #[test]
    fn the_example_names_every_setting_and_only_settings() {
        assert_eq!(example_keys(), serve_flags());
    }

    #[test]
    fn the_example_is_the_defaults() {
        let example = parse(EXAMPLE).expect("the example parses").validate();
        let example = example.expect("the example is valid");
        let defaults = RawSettings::default().validate().expect("defaults");
        assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn keys_are_the_flag_names_and_the_old_spelling_still_reads() {
        let new = parse("lane-size = 4\n[console]\nlink-ttl = \"5m\"\n").unwrap();
        let old = parse("lane_size = 4\n[console]\nlink_ttl = \"5m\"\n").unwrap();
        for raw in [new, old] {
            assert_eq!(raw.lane_size, Some(4));
            assert_eq!(raw.console.link_ttl.as_deref(), Some("5m"));
        }
        let both = parse("lane-size = 4\nlane_size = 5\n")
            .unwrap_err()
            .to_string();
        assert!(both.contains("duplicate"), "{both}");
        let unknown = parse("lane-sise = 4\n").unwrap_err().to_string();
        assert!(unknown.contains("lane-sise"), "{unknown}");
    }

    /// Every setting the example sets is read under its snake_case spelling too (each field
    /// needs its alias; this catches one added without).
    #[test]
    fn every_setting_reads_under_its_old_spelling() {
        let mut table = "";
        for line in EXAMPLE.lines() {
            if line == "[console]" || line == "[egress]" || line == "[traces]" {
                table = line;
            }
            let Some((key, value)) = line.split_once(" = ") else {
                continue;
            };
            if key.starts_with('#') || !key.contains('-') {
                continue;
            }
            let old = format!("{table}\n{} = {value}\n", key.replace('-', "_"));
            assert!(parse(&old).is_ok(), "{old}: {:?}", parse(&old).err());
        }
    }

    #[test]
    fn an_admin_token_in_the_file_says_to_use_the_environment() {
        for key in ["admin-token", "admin_token"] {
            let err = parse(&format!("{key} = \"sk_admin_0123456789abcdef\"\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("SLUICE_ADMIN_TOKEN"), "{key}: {err}");
            assert!(err.contains("line 1"), "{key}: {err}");
        }
    }
}
