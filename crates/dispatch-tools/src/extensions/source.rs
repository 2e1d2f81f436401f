//! Where script and ext tools come from, and keeping the registry in step with the files:
//! the engine asks [`ExtensionTools::changed`] at every round start, which compares a few file
//! times, and reloads only when something changed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use dispatch_engine::{Origin, Registry, RegistryError, Tool, ToolSource};

use super::api::ApiTool;
use super::definition::{self, Body, DEFINITION_FILE, Definition, Problem, Scope};
use super::script::ScriptTool;
use crate::Stores;
use crate::shell::process::SandboxConfig;
use crate::web::NetPolicy;

/// Most tool folders read from one directory; a directory with more is cut there, with a
/// problem saying so.
const MAX_TOOLS_PER_DIR: usize = 256;

/// The directories tools are loaded from.
#[derive(Clone, Debug, Default)]
pub struct ToolDirs {
    /// The user's script tools: `$XDG_CONFIG_HOME/tooldispatch/tools`.
    pub user: Option<PathBuf>,
    /// The work directory's `.tooldispatch/tools`, only when the user trusts the directory.
    pub project: Option<PathBuf>,
    /// Installed extensions: `$XDG_DATA_HOME/tooldispatch/extensions`.
    pub extensions: Option<PathBuf>,
}

impl ToolDirs {
    /// Every tool folder to load, with its scope, in a stable order (user, project, then each
    /// extension by name), and the problems met listing them.
    fn folders(&self) -> (Vec<(PathBuf, Scope)>, Vec<Problem>) {
        let mut out = Vec::new();
        let mut problems = Vec::new();
        if let Some(dir) = &self.user {
            out.extend(
                subdirs(dir, &mut problems)
                    .into_iter()
                    .map(|d| (d, Scope::User)),
            );
        }
        if let Some(dir) = &self.project {
            out.extend(
                subdirs(dir, &mut problems)
                    .into_iter()
                    .map(|d| (d, Scope::Project)),
            );
        }
        if let Some(dir) = &self.extensions {
            for ext in subdirs(dir, &mut problems) {
                let name = file_name(&ext);
                out.extend(
                    subdirs(&ext, &mut problems)
                        .into_iter()
                        .map(|d| (d, Scope::Extension(name.clone()))),
                );
            }
        }
        (out, problems)
    }

    /// File times of everything loading reads: a changed stamp means reload.
    fn stamp(&self) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
        let mut stamp = Vec::new();
        let mut note = |path: &Path| {
            let meta = std::fs::metadata(path).ok();
            stamp.push((
                path.to_path_buf(),
                meta.as_ref().and_then(|m| m.modified().ok()),
                meta.map_or(0, |m| m.len()),
            ));
        };
        let mut ignored = Vec::new();
        for root in [&self.user, &self.project].into_iter().flatten() {
            note(root);
            for dir in subdirs(root, &mut ignored) {
                note(&dir);
                note(&dir.join(DEFINITION_FILE));
            }
        }
        if let Some(root) = &self.extensions {
            note(root);
            for ext in subdirs(root, &mut ignored) {
                note(&ext);
                for dir in subdirs(&ext, &mut ignored) {
                    note(&dir);
                    note(&dir.join(DEFINITION_FILE));
                }
            }
        }
        stamp
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The folders in `dir` (none when it does not exist), sorted; hidden ones (an install's
/// staging folder among them) skipped.
pub(crate) fn folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// [`folders`], at most [`MAX_TOOLS_PER_DIR`] of them (a problem says when there were more).
fn subdirs(dir: &Path, problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    let mut out = folders(dir);
    if out.len() > MAX_TOOLS_PER_DIR {
        problems.push(Problem::new(
            dir,
            "(folder)",
            format!(
                "holds {} folders; only the first {MAX_TOOLS_PER_DIR} were read",
                out.len()
            ),
        ));
        out.truncate(MAX_TOOLS_PER_DIR);
    }
    out
}

/// What one load found.
#[derive(Default)]
struct Loaded {
    definitions: Vec<Arc<Definition>>,
    problems: Vec<Problem>,
}

/// The script and ext tools of a dispatcher, kept in step with their files.
pub struct ExtensionTools {
    dirs: ToolDirs,
    sandbox: SandboxConfig,
    net: Arc<NetPolicy>,
    /// The stores an API tool's requests use (the result cache).
    stores: Stores,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    stamp: Option<Vec<(PathBuf, Option<SystemTime>, u64)>>,
    loaded: Loaded,
}

impl ExtensionTools {
    pub fn new(
        dirs: ToolDirs,
        sandbox: SandboxConfig,
        net: Arc<NetPolicy>,
        stores: Stores,
    ) -> ExtensionTools {
        ExtensionTools {
            dirs,
            sandbox,
            net,
            stores,
            state: Mutex::default(),
        }
    }

    pub fn dirs(&self) -> &ToolDirs {
        &self.dirs
    }

    /// The definitions loaded by the last reload.
    pub fn definitions(&self) -> Vec<Arc<Definition>> {
        self.state
            .lock()
            .map(|s| s.loaded.definitions.clone())
            .unwrap_or_default()
    }

    /// Every definition refused by the last reload, and why.
    pub fn problems(&self) -> Vec<Problem> {
        self.state
            .lock()
            .map(|s| s.loaded.problems.clone())
            .unwrap_or_default()
    }

    /// The loaded script tool `name` (with or without `script_`/`ext_`).
    pub fn script(&self, name: &str) -> Option<Arc<Definition>> {
        // Looked up under the lock: test_tool asks on every call, and copying every
        // definition to find one would grow with the number of tools installed.
        let state = self.state.lock().ok()?;
        state
            .loaded
            .definitions
            .iter()
            .find(|d| {
                matches!(d.body, Body::Script { .. })
                    && (d.name == name || name.strip_prefix(d.scope.prefix()) == Some(&d.name))
            })
            .cloned()
    }

    /// The tool a definition becomes.
    pub fn tool_of(&self, def: &Arc<Definition>) -> Arc<dyn Tool> {
        match &def.body {
            Body::Script { .. } => Arc::new(ScriptTool::new(def.clone(), self.sandbox.clone())),
            Body::Api(api) => Arc::new(ApiTool::new(
                def.clone(),
                api.clone(),
                self.net.clone(),
                &self.stores,
            )),
        }
    }

    /// Read every definition, and register those that hold into `registry`.
    fn load_into(&self, registry: &mut Registry) -> Loaded {
        let (folders, mut problems) = self.dirs.folders();
        let mut definitions: Vec<Arc<Definition>> = Vec::new();
        for (dir, scope) in folders {
            let def = match definition::load(&dir, scope) {
                Ok(def) => Arc::new(def),
                Err(found) => {
                    problems.extend(found);
                    continue;
                }
            };
            let name = def.tool_name();
            if let Some(first) = definitions.iter().find(|d| d.tool_name() == name) {
                problems.push(Problem::new(
                    &def.file(),
                    "name",
                    format!(
                        "{name} is already defined by the {} in {}; the first one is kept (user tools come before project tools)",
                        first.scope.describe(),
                        first.dir.display()
                    ),
                ));
                continue;
            }
            match registry.register(self.tool_of(&def)) {
                Ok(()) => definitions.push(def),
                Err(e) => problems.push(registration_problem(&def, e)),
            }
        }
        Loaded {
            definitions,
            problems,
        }
    }
}

/// A registration refusal as a problem of the definition's file.
pub fn registration_problem(def: &Definition, e: RegistryError) -> Problem {
    match &e {
        RegistryError::BadSchema { reason, .. } => Problem::new(
            &def.file(),
            "parameters",
            format!("is not a JSON Schema that compiles: {reason}"),
        ),
        RegistryError::TooLarge { field, .. } => Problem::new(&def.file(), *field, e.to_string()),
        other => Problem::new(&def.file(), "name", other.to_string()),
    }
}

impl ToolSource for ExtensionTools {
    fn changed(&self) -> bool {
        let stamp = self.dirs.stamp();
        self.state
            .lock()
            .map_or(true, |s| s.stamp.as_ref() != Some(&stamp))
    }

    fn apply(&self, registry: &mut Registry) {
        // Stamped before reading, so an edit made during the load is seen next round.
        let stamp = self.dirs.stamp();
        registry.retain(|t| !matches!(t.spec().origin, Origin::Script | Origin::Ext));
        let loaded = self.load_into(registry);
        if let Ok(mut state) = self.state.lock() {
            state.stamp = Some(stamp);
            state.loaded = loaded;
        }
    }
}
