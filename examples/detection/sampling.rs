//! The benchmark's configuration: the defaults with the keys its flags set
//! (`--fast-interval`, `--slow-interval`, `--evaluation-interval`,
//! `--leak-threshold`, `--leak-for`), read by the daemon's own loader, so
//! each key's bounds and the checks across keys (a slow tier faster than
//! the fast one, a leak window of too few process lists) are the daemon's,
//! not copies of them.

use vramd::app::{Config, load};
use vramd::config::{LoadOptions, env_var_for};

use super::args::{Args, refuse};

/// The configuration the corpus is played with; a refused flag ends the
/// benchmark with the configuration's own message.
pub fn config(args: &Args) -> Config {
    let env = args.keys.iter().map(|(_, key, text)| (env_var_for(key), text.clone())).collect();
    // No file and no search path: only the built-in defaults and the flags.
    let options =
        LoadOptions { config_path: None, search_paths: Vec::new(), env, ..Default::default() };
    load(&options).unwrap_or_else(|error| {
        let passed: Vec<String> = args
            .keys
            .iter()
            .map(|(flag, key, _)| format!("{flag} as {}", env_var_for(key)))
            .collect();
        refuse(&format!("{error}\n(the flags are passed as variables: {})", passed.join(", ")))
    })
}
