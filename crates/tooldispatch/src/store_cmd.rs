//! `store stats` and `store gc`: housekeeping on a store without running a round.

use std::time::Duration;

use clap::{Args, Subcommand};
use dispatch_store::GcPolicy;

use crate::config::Config;

use crate::{CliError, setup};

#[derive(Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Print what the store holds (counts, size, cache hit rate) as one JSON object.
    Stats(Target),
    /// Drop expired cache entries and error records and the dedupe entries of old runs; print what was dropped as JSON.
    Gc(GcArgs),
}

#[derive(Args)]
struct Target {
    /// Store URL: sqlite:PATH (default under $XDG_DATA_HOME/tooldispatch/), redis://HOST:PORT/DB or memory:.
    #[arg(long, env = "TOOLDISPATCH_STORE")]
    store: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG")]
    config: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct GcArgs {
    #[command(flatten)]
    target: Target,
    /// Drop the dedupe entries of runs whose last round is older than this many days.
    #[arg(long, default_value_t = 7)]
    older_than_days: u64,
    /// Delete files remove_file moved to the trash more than this many days ago (their
    /// versions can then no longer be restored).
    #[arg(long, default_value_t = 30)]
    trash_older_than_days: u64,
}

pub async fn run(args: StoreArgs) -> Result<(), CliError> {
    let failed = |e: dispatch_store::StoreError| CliError::failed(e.to_string());
    let json = match args.command {
        StoreCommand::Stats(target) => {
            let store = setup::open_store(
                target.store.as_deref(),
                &Config::load(target.config.as_deref())?,
            )?;
            serde_json::to_string(&store.stats().await.map_err(failed)?)
        }
        StoreCommand::Gc(gc) => {
            let secs = gc
                .older_than_days
                .checked_mul(24 * 3600)
                .ok_or_else(|| CliError::input("--older-than-days is too large"))?;
            let policy = GcPolicy {
                finished_runs_older_than: Duration::from_secs(secs),
            };
            let store = setup::open_store(
                gc.target.store.as_deref(),
                &Config::load(gc.target.config.as_deref())?,
            )?;
            let mut report = serde_json::to_value(store.gc(&policy).await.map_err(failed)?)
                .map_err(|e| CliError::failed(format!("cannot encode the answer: {e}")))?;
            let trash_secs = gc
                .trash_older_than_days
                .checked_mul(24 * 3600)
                .ok_or_else(|| CliError::input("--trash-older-than-days is too large"))?;
            let swept = dispatch_tools::files::write::sweep_trash(
                &setup::data_dir(),
                Duration::from_secs(trash_secs),
            )
            .map_err(|e| {
                CliError::failed(format!(
                    "cannot clean the trash in {}: {e}",
                    setup::data_dir().display()
                ))
            })?;
            if let Some(map) = report.as_object_mut() {
                map.insert("trash_files_dropped".into(), swept.files.into());
                map.insert("trash_bytes_dropped".into(), swept.bytes.into());
            }
            serde_json::to_string(&report)
        }
    }
    .map_err(|e| CliError::failed(format!("cannot encode the answer as JSON: {e}")))?;
    crate::print_line(&json);
    Ok(())
}
