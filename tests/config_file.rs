//! config/shardwire.toml is the configuration reference: it must load, cover every key, and its
//! commented-out examples must be valid too. `shardwire check-config` masks secrets and names the
//! key of a mistake.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shardwire::config::Config;

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/shardwire.toml")
}

fn example_text() -> String {
    std::fs::read_to_string(example_path()).unwrap()
}

/// `# key = value` and `# [section]` lines are commented-out settings; other comments are prose.
fn uncomment_settings(text: &str) -> String {
    let is_ident =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    text.lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.split_once(" = ").is_some_and(|(k, _)| is_ident(k))
                    || is_ident(rest.trim_matches(|c| c == '[' || c == ']'))
                        && rest.starts_with('[') =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every table name and key in `value`, e.g. "proxy", "listen", "tablespace_sets", "shards".
fn key_names(value: &toml::Value, out: &mut BTreeSet<String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                out.insert(k.clone());
                key_names(v, out);
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| key_names(v, out)),
        _ => {}
    }
}

fn shardwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardwire"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn example_config_loads() {
    let config = Config::load(&example_path()).unwrap();
    assert_eq!(config.listen_addr().port(), 6432);
    assert_eq!(config.proxy.database, "app");
    assert_eq!(config.users[0].name, "app");
    assert_eq!(config.shards.len(), 4);
}

#[test]
fn commented_out_examples_are_valid_too() {
    let tmp = tempfile::tempdir().unwrap();
    let mut text = uncomment_settings(&example_text());
    for (example, name) in [
        ("/etc/shardwire/server.crt", "server.crt"),
        ("/etc/shardwire/server.key", "server.key"),
    ] {
        let path = tmp.path().join(name);
        std::fs::write(&path, "placeholder").unwrap();
        assert!(text.contains(example), "example names {example}");
        text = text.replace(example, path.to_str().unwrap());
    }
    let config = Config::parse(&text, "uncommented example").unwrap();
    assert_eq!(config.tablespace_sets.len(), 1);
    assert_eq!(config.tablespaces.len(), 1);
    assert!(config.tls.is_some());

    // Serialising the fully populated configuration lists every key there is; each must be
    // explained in the example.
    let mut keys = BTreeSet::new();
    key_names(&toml::Value::try_from(&config).unwrap(), &mut keys);
    let example = example_text();
    let documented = |key: &str| {
        example.lines().any(|line| {
            let line = line.trim_start_matches("# ");
            line.starts_with(&format!("{key} ="))
                || line == format!("[{key}]")
                || line == format!("[[{key}]]")
        })
    };
    let missing: Vec<&String> = keys.iter().filter(|k| !documented(k)).collect();
    assert!(
        missing.is_empty(),
        "keys missing from config/shardwire.toml: {missing:?}"
    );
}

#[test]
fn check_config_prints_the_example_with_passwords_masked() {
    let out = shardwire(&["check-config", "--config", example_path().to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("password = \"********\""), "{stdout}");
    assert!(!stdout.contains("password = \"app\""), "{stdout}");
    // Resolved: defaults are shown even where the file leaves them out.
    Config::parse(&stdout, "check-config output").unwrap();
}

#[test]
fn check_config_masks_passwords_in_urls() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.toml");
    std::fs::write(
        &path,
        "[proxy]\nlisten = \"127.0.0.1:6432\"\ndatabase = \"app\"\n\
         [[users]]\nname = \"app\"\npassword = \"hunter2\"\n\
         [catalog]\nurl = \"postgres://cat:c4talog@10.0.0.9:5432/app\"\n\
         [[shards]]\nname = \"s1\"\nurl = \"postgres://postgres:s3cret@10.0.0.1:5432/app\"\n",
    )
    .unwrap();
    let out = shardwire(&["check-config", "--config", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in ["hunter2", "s3cret", "c4talog"] {
        assert!(!stdout.contains(secret), "{secret} shown: {stdout}");
    }
    assert!(
        stdout.contains("postgres://postgres:********@10.0.0.1:5432/app"),
        "{stdout}"
    );
}

#[test]
fn check_config_fails_naming_the_broken_key() {
    let tmp = tempfile::tempdir().unwrap();
    let example = example_text();
    for (broken, key) in [
        (
            example.replace("listen = \"127.0.0.1:6432\"", "listen = \"localhost\""),
            "proxy.listen",
        ),
        (
            example.replace("idle_timeout_s = 600", "idle_timeout = 600"),
            "idle_timeout",
        ),
        (
            example.replace("127.0.0.1:55433/app", "127.0.0.1:55433"),
            "shards[2].url",
        ),
    ] {
        assert_ne!(broken, example);
        let path = tmp.path().join("broken.toml");
        std::fs::write(&path, broken).unwrap();
        let out = shardwire(&["check-config", "--config", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted a broken {key}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
        assert!(out.stdout.is_empty());
    }
}
