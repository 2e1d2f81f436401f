//! `tooldispatch secret set|list|remove`: the secrets tools and configs refer to as
//! `{{secret:NAME}}` (model keys, bot tokens, MCP headers), kept sealed in the store. A value
//! never goes through the command line, where `ps` and shell history would see it: it comes
//! on stdin, or is typed at a hidden prompt.

use std::io::{IsTerminal, Read};

use clap::{Args, Subcommand};

use crate::config::Config;
use crate::{CliError, setup};

#[derive(Args)]
pub struct SecretArgs {
    #[command(subcommand)]
    command: SecretCommand,
    /// Store URL: sqlite:PATH (default under $XDG_DATA_HOME/tooldispatch/), redis://HOST:PORT/DB or memory:.
    #[arg(long, env = "TOOLDISPATCH_STORE", global = true)]
    store: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG", global = true)]
    config: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum SecretCommand {
    /// Store a secret: the value is read from stdin, or typed at a hidden prompt when stdin is
    /// a terminal. Replaces any value the name had.
    Set {
        /// The name configs and tools use: `{{secret:NAME}}`, e.g. OPENAI_API_KEY.
        name: String,
    },
    /// Print the stored secrets' names, one per line (never their values).
    List {
        /// Print a JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Forget a secret.
    Remove {
        /// The secret's name, as `secret list` shows it.
        name: String,
    },
}

/// The longest value accepted: far beyond any key or token, short of a pasted file.
const MAX_VALUE_BYTES: usize = 64 * 1024;

pub async fn run(args: SecretArgs) -> Result<(), CliError> {
    let store = setup::open_store(
        args.store.as_deref(),
        &Config::load(args.config.as_deref())?,
    )?;
    let failed = |e: dispatch_store::StoreError| CliError::failed(e.to_string());
    let valid = |name: &str| {
        dispatch_store::secrets::validate_name(name).map_err(|e| CliError::input(e.to_string()))
    };
    match args.command {
        SecretCommand::Set { name } => {
            valid(&name)?;
            let value = read_value(&name)?;
            store.secret_set(&name, &value).await.map_err(failed)?;
            eprintln!("tooldispatch: stored secret {name}; refer to it as {{{{secret:{name}}}}}");
        }
        SecretCommand::List { json } => {
            let names = store.secret_names().await.map_err(failed)?;
            if json {
                println!("{}", serde_json::Value::from(names));
            } else {
                for name in names {
                    println!("{name}");
                }
            }
        }
        SecretCommand::Remove { name } => {
            valid(&name)?;
            if !store.secret_delete(&name).await.map_err(failed)? {
                return Err(CliError::failed(format!(
                    "no secret named {name}; `tooldispatch secret list` shows the names"
                )));
            }
            eprintln!("tooldispatch: removed secret {name}");
        }
    }
    Ok(())
}

/// The value from a hidden prompt (stdin is a terminal) or from stdin, without the one line
/// break that ends it.
fn read_value(name: &str) -> Result<String, CliError> {
    let mut value = if std::io::stdin().is_terminal() {
        crate::terminal::prompt_hidden(&format!("Value for {name} (typing is hidden): "))
            .map_err(CliError::input)?
    } else {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_VALUE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| CliError::failed(format!("cannot read the value from stdin: {e}")))?;
        String::from_utf8(bytes)
            .map_err(|_| CliError::input("the value on stdin is not UTF-8 text"))?
    };
    if value.len() > MAX_VALUE_BYTES {
        return Err(CliError::input(format!(
            "the value is over {} KiB; a secret is a key or a token, not a file",
            MAX_VALUE_BYTES / 1024
        )));
    }
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        return Err(CliError::input(format!(
            "no value for {name}: pipe it in (`printf %s \"$TOKEN\" | tooldispatch secret set {name}`) or run the command at a terminal to type it"
        )));
    }
    Ok(value)
}
