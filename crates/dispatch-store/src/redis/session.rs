//! Sessions, runs, transcripts, events, pending tasks and the call journal in Redis.
//!
//! A round commit is one Lua script rather than WATCH/MULTI/EXEC. Redis runs a script with no
//! other command in between, so the round check and every write are one atomic step in one
//! round trip, with no retry loop. A script can also use what it writes: the event sequence
//! numbers are the list lengths `RPUSH` returns, published in the same step. WATCH would need
//! a read round trip first, would have to watch the session's event list as well (so commits
//! of different runs of one session would abort each other and retry), and still could not
//! know the sequence numbers to publish before EXEC.
//!
//! Redis does not roll a script back if a command in it fails halfway, so the script checks
//! the round before its first write and everything it writes is encoded beforehand in Rust.
//! Out of memory, Redis refuses only a script's first write (a script without flags, like
//! this one, is then let finish), so that case writes nothing either.

use std::collections::HashMap;

use ::redis::aio::ConnectionManager;
use async_trait::async_trait;

use super::{RedisStore, backend, from_json, parse_u64, to_json};
use crate::{
    Committed, DedupeEntry, JournalEntry, PendingTask, RoundRecord, RunSnapshot, SessionSnapshot,
    SessionStore, StoreError, StoreResult, TranscriptEntry,
};

/// Apply one round. KEYS: run, session, marked, dedupe, dedupe-order, transcript, events,
/// pending, pending-order, journal, journal-order. ARGV: the round that must be the run's last
/// one (`0` for none), round, write_epoch, turn_allow_all, has_todos, todos, events channel,
/// has_pending, pending hash, pending JSON, then six counted lists (a count, then that many
/// values): marked names, dedupe puts (key and entry, so twice the entries), dedupe drops,
/// transcript entries, events, closed journal ids, answered pending tasks, touched paths; then
/// `1` when the round may have touched anything, else `0`. Returns -1 (and writes nothing)
/// when the round does not follow the last one, else the sequence number of the session's
/// last event (the round's own events end there).
///
/// Touches are recorded in the run hash at the round's write epoch: `touched:<path>` and
/// `wiped_at` (see lib.rs `path_entry_valid`).
///
/// Rounds are compared as text, so no number goes through Lua's doubles.
const COMMIT: &str = r#"
local last = redis.call('HGET', KEYS[1], 'rounds') or '0'
if last ~= ARGV[1] then
  return -1
end
redis.call('HSET', KEYS[1], 'rounds', ARGV[2], 'write_epoch', ARGV[3], 'turn_allow_all', ARGV[4])
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[2], 'todos', ARGV[6])
end

local at = 11
-- The bounds of the next counted list in ARGV.
local function next_list()
  local count = tonumber(ARGV[at])
  local first = at + 1
  at = first + count
  return first, at - 1
end

local first, last_arg = next_list()
for i = first, last_arg do
  redis.call('SADD', KEYS[3], ARGV[i])
end

-- Puts before drops: when a round both stores and invalidates a key, the key is gone.
first, last_arg = next_list()
for i = first, last_arg, 2 do
  if not redis.call('ZSCORE', KEYS[5], ARGV[i]) then
    local slot = redis.call('HINCRBY', KEYS[1], 'dedupe_next', 1)
    redis.call('ZADD', KEYS[5], slot, ARGV[i])
  end
  redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
end
first, last_arg = next_list()
for i = first, last_arg do
  redis.call('HDEL', KEYS[4], ARGV[i])
  redis.call('ZREM', KEYS[5], ARGV[i])
end

first, last_arg = next_list()
for i = first, last_arg do
  redis.call('RPUSH', KEYS[6], ARGV[i])
end

-- The round's events in one RPUSH (in slices, as Lua's unpack has a stack limit) and one
-- PUBLISH: {"first_seq":N,"events":[...]}, each event's sequence number being N + its index.
first, last_arg = next_list()
local events_seq = tonumber(redis.call('LLEN', KEYS[7]))
if last_arg >= first then
  local i = first
  while i <= last_arg do
    local upto = math.min(i + 999, last_arg)
    events_seq = redis.call('RPUSH', KEYS[7], unpack(ARGV, i, upto))
    i = upto + 1
  end
  local first_seq = events_seq - (last_arg - first)
  redis.call('PUBLISH', ARGV[7],
    '{"first_seq":' .. first_seq .. ',"events":[' .. table.concat(ARGV, ',', first, last_arg) .. ']}')
end

if ARGV[8] == '1' then
  if not redis.call('ZSCORE', KEYS[9], ARGV[9]) then
    local slot = redis.call('HINCRBY', KEYS[2], 'pending_next', 1)
    redis.call('ZADD', KEYS[9], slot, ARGV[9])
  end
  redis.call('HSET', KEYS[8], ARGV[9], ARGV[10])
end

first, last_arg = next_list()
for i = first, last_arg do
  redis.call('HDEL', KEYS[10], ARGV[i])
  redis.call('ZREM', KEYS[11], ARGV[i])
end

first, last_arg = next_list()
for i = first, last_arg do
  redis.call('HDEL', KEYS[8], ARGV[i])
  redis.call('ZREM', KEYS[9], ARGV[i])
end

first, last_arg = next_list()
for i = first, last_arg do
  redis.call('HSET', KEYS[1], 'touched:' .. ARGV[i], ARGV[3])
end
if ARGV[at] == '1' then
  redis.call('HSET', KEYS[1], 'wiped_at', ARGV[3])
end
return events_seq
"#;

static COMMIT_SCRIPT: std::sync::LazyLock<::redis::Script> =
    std::sync::LazyLock::new(|| ::redis::Script::new(COMMIT));

/// Add or replace a journal entry; a replaced one moves last, as in the memory store.
/// KEYS: session, journal, journal-order. ARGV: entry id, entry JSON.
const JOURNAL_BEGIN: &str = r#"
local slot = redis.call('HINCRBY', KEYS[1], 'journal_next', 1)
redis.call('ZADD', KEYS[3], slot, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"#;

/// Push a counted list onto script arguments.
fn counted(args: &mut Vec<String>, items: impl ExactSizeIterator<Item = String>) {
    args.push(items.len().to_string());
    args.extend(items);
}

/// The values of a hash in the order a sorted set lists their fields. The two are only ever
/// written together; a member without a field is skipped rather than reported.
fn in_order<T: serde::de::DeserializeOwned>(
    order: Vec<String>,
    mut values: HashMap<String, String>,
    what: &str,
) -> StoreResult<Vec<T>> {
    order
        .into_iter()
        .filter_map(|field| values.remove(&field))
        .map(|text| from_json(&text, what))
        .collect()
}

/// A dedupe entry as stored: the entry and the write epoch of the round that stored it
/// (absent, so 0, in entries written before the epoch was kept).
#[derive(serde::Serialize)]
struct StoredEntryRef<'a> {
    #[serde(flatten)]
    entry: &'a DedupeEntry,
    stored_at: u64,
}

#[derive(serde::Deserialize)]
struct StoredEntry {
    #[serde(flatten)]
    entry: DedupeEntry,
    #[serde(default)]
    stored_at: u64,
}

/// The run hash field that holds the epoch of the last round that touched `path`.
fn touched_field(path: &str) -> String {
    format!("touched:{path}")
}

/// The entries still valid, given the run's wipe epoch and `touched` (path → epoch).
fn still_valid(
    entries: Vec<StoredEntry>,
    wiped_at: u64,
    touched: &HashMap<String, u64>,
) -> Vec<DedupeEntry> {
    entries
        .into_iter()
        .filter(|stored| {
            crate::path_entry_valid(&stored.entry.validity, stored.stored_at, wiped_at, |p| {
                touched.get(p).copied().unwrap_or(0)
            })
        })
        .map(|stored| stored.entry)
        .collect()
}

/// The paths that path-scoped `entries` depend on, each once.
fn paths_of(entries: &[StoredEntry]) -> Vec<String> {
    let mut paths: Vec<String> = entries
        .iter()
        .filter_map(|stored| match &stored.entry.validity {
            crate::Validity::Paths { paths } => Some(paths.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The sorted set `order` and the hash `hash`, read together.
async fn ordered_values(
    conn: &mut ConnectionManager,
    hash: String,
    order: String,
    op: String,
) -> StoreResult<(Vec<String>, HashMap<String, String>)> {
    ::redis::pipe()
        .atomic()
        .cmd("ZRANGE")
        .arg(order)
        .arg(0)
        .arg(-1)
        .cmd("HGETALL")
        .arg(hash)
        .query_async(conn)
        .await
        .map_err(backend(op))
}

fn session_snapshot(todos: Option<String>, marked: Vec<String>) -> StoreResult<SessionSnapshot> {
    Ok(SessionSnapshot {
        marked: marked.into_iter().collect(),
        todos: match todos {
            Some(text) => from_json(&text, "todo list")?,
            None => Vec::new(),
        },
    })
}

#[async_trait]
impl SessionStore for RedisStore {
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let mut conn = self.connection().await?;
        let keys = &self.keys;
        type Loaded = (
            Option<String>,
            Vec<String>,
            HashMap<String, String>,
            Vec<String>,
            HashMap<String, String>,
        );
        // MULTI/EXEC so the snapshot never mixes two commits. The whole run hash: it also
        // holds the touched paths the entries are checked against.
        let (todos, marked, run_hash, order, dedupe): Loaded = ::redis::pipe()
            .atomic()
            .cmd("HGET")
            .arg(keys.session(session))
            .arg("todos")
            .cmd("SMEMBERS")
            .arg(keys.marked(session))
            .cmd("HGETALL")
            .arg(keys.run(session, run))
            .cmd("ZRANGE")
            .arg(keys.dedupe_order(session, run))
            .arg(0)
            .arg(-1)
            .cmd("HGETALL")
            .arg(keys.dedupe(session, run))
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("load {session}/{run}")))?;

        let snapshot = session_snapshot(todos, marked)?;
        let field = |name: &str| run_hash.get(name).map(String::as_str);
        let wiped_at = parse_u64(field("wiped_at"), "wipe epoch")?;
        let mut touched = HashMap::new();
        for (name, value) in &run_hash {
            if let Some(path) = name.strip_prefix("touched:") {
                touched.insert(
                    path.to_string(),
                    parse_u64(Some(value), "touched path epoch")?,
                );
            }
        }
        let entries: Vec<StoredEntry> = in_order(order, dedupe, "dedupe entry")?;
        let run = RunSnapshot {
            rounds: parse_u64(field("rounds"), "round count")?,
            write_epoch: parse_u64(field("write_epoch"), "write epoch")?,
            turn_allow_all: field("turn_allow_all") == Some("1"),
            dedupe: still_valid(entries, wiped_at, &touched),
        };
        Ok((snapshot, run))
    }

    async fn load_keys(
        &self,
        session: &str,
        run: &str,
        wanted: &[String],
    ) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let mut conn = self.connection().await?;
        let keys = &self.keys;
        let run_key = keys.run(session, run);
        let op = || format!("load {session}/{run}");
        type Header = (
            Option<String>,
            Vec<String>,
            (
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
            ),
        );
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .cmd("HGET")
            .arg(keys.session(session))
            .arg("todos")
            .cmd("SMEMBERS")
            .arg(keys.marked(session))
            .cmd("HMGET")
            .arg(&run_key)
            .arg(&["rounds", "write_epoch", "turn_allow_all", "wiped_at"]);
        // HMGET needs at least one field.
        if !wanted.is_empty() {
            pipe.cmd("HMGET").arg(keys.dedupe(session, run)).arg(wanted);
        }
        let (header, texts): (Header, Vec<Option<String>>) = if wanted.is_empty() {
            let header: Header = pipe.query_async(&mut conn).await.map_err(backend(op()))?;
            (header, Vec::new())
        } else {
            let (todos, marked, run_fields, texts) =
                pipe.query_async(&mut conn).await.map_err(backend(op()))?;
            ((todos, marked, run_fields), texts)
        };
        let (todos, marked, (rounds, write_epoch, allow, wiped_at)) = header;
        let snapshot = session_snapshot(todos, marked)?;
        let entries = texts
            .into_iter()
            .flatten()
            .map(|text| from_json::<StoredEntry>(&text, "dedupe entry"))
            .collect::<StoreResult<Vec<_>>>()?;
        // The epochs of the paths those entries depend on. A commit between the two reads can
        // only make an entry look stale, never a stale one valid.
        let paths = paths_of(&entries);
        let mut touched = HashMap::new();
        if !paths.is_empty() {
            let fields: Vec<String> = paths.iter().map(|p| touched_field(p)).collect();
            let epochs: Vec<Option<String>> = ::redis::cmd("HMGET")
                .arg(&run_key)
                .arg(&fields)
                .query_async(&mut conn)
                .await
                .map_err(backend(op()))?;
            for (path, epoch) in paths.into_iter().zip(epochs) {
                touched.insert(path, parse_u64(epoch.as_deref(), "touched path epoch")?);
            }
        }
        let run = RunSnapshot {
            rounds: parse_u64(rounds.as_deref(), "round count")?,
            write_epoch: parse_u64(write_epoch.as_deref(), "write epoch")?,
            turn_allow_all: allow.as_deref() == Some("1"),
            dedupe: still_valid(
                entries,
                parse_u64(wiped_at.as_deref(), "wipe epoch")?,
                &touched,
            ),
        };
        Ok((snapshot, run))
    }

    async fn commit_round(&self, record: RoundRecord) -> StoreResult<Committed> {
        let conflict = |record: RoundRecord| StoreError::Conflict {
            session: record.session,
            run: record.run,
            round: record.round,
        };
        // Round 0 never follows anything; refuse it before building the script's arguments.
        let Some(previous) = record.round.checked_sub(1) else {
            return Err(conflict(record));
        };
        let keys = &self.keys;
        let (session, run) = (record.session.as_str(), record.run.as_str());
        let script_keys = [
            keys.run(session, run),
            keys.session(session),
            keys.marked(session),
            keys.dedupe(session, run),
            keys.dedupe_order(session, run),
            keys.transcript(session),
            keys.events(session),
            keys.pending(session),
            keys.pending_order(session),
            keys.journal(session),
            keys.journal_order(session),
        ];

        let mut args = vec![
            previous.to_string(),
            record.round.to_string(),
            record.write_epoch.to_string(),
            u8::from(record.turn_allow_all).to_string(),
        ];
        match &record.todos {
            Some(todos) => args.extend(["1".to_string(), to_json(todos)?]),
            None => args.extend(["0".to_string(), String::new()]),
        }
        args.push(keys.events(session));
        match &record.pending {
            Some(task) => args.extend(["1".to_string(), task.task_hash.clone(), to_json(task)?]),
            None => args.extend(["0".to_string(), String::new(), String::new()]),
        }
        counted(&mut args, record.marked.iter().cloned());
        let mut puts = Vec::with_capacity(record.dedupe_put.len() * 2);
        for entry in &record.dedupe_put {
            puts.push(entry.key.clone());
            puts.push(to_json(&StoredEntryRef {
                entry,
                stored_at: record.write_epoch,
            })?);
        }
        counted(&mut args, puts.into_iter());
        counted(&mut args, record.dedupe_drop.iter().cloned());
        // Each entry carries its commit time for chat history (redis/chat.rs); readers that
        // want only the entry ignore the extra field.
        let now = self.clock.now_ms();
        let transcript = record
            .transcript
            .iter()
            .map(|entry| to_json(&super::chat::Stamped { at_ms: now, entry }))
            .collect::<StoreResult<Vec<_>>>()?;
        counted(&mut args, transcript.into_iter());
        counted(&mut args, record.events.iter().map(|event| event.to_json()));
        counted(&mut args, record.journal_done.iter().cloned());
        counted(&mut args, record.answered.iter().cloned());
        counted(&mut args, record.touched_paths.iter().cloned());
        args.push(u8::from(record.touched_all).to_string());

        let mut conn = self.connection().await?;
        // EVALSHA, falling back to EVAL once when Redis does not know the script yet: the
        // script's text crosses the wire once per Redis start, not once per round.
        let mut invocation = COMMIT_SCRIPT.prepare_invoke();
        invocation.key(&script_keys[..]).arg(&args);
        let last_seq: i64 = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(backend(format!(
                "commit round {} of {session}/{run}",
                record.round
            )))?;
        let Ok(last_seq) = u64::try_from(last_seq) else {
            return Err(conflict(record));
        };
        let count = u64::try_from(record.events.len()).unwrap_or(u64::MAX);
        Ok(Committed {
            events: last_seq.saturating_sub(count) + 1..last_seq + 1,
        })
    }

    async fn transcript(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let mut conn = self.connection().await?;
        let texts: Vec<String> = ::redis::cmd("LRANGE")
            .arg(self.keys.transcript(session))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read the transcript of {session}")))?;
        let mut entries = Vec::with_capacity(texts.len());
        for text in texts {
            let entry: TranscriptEntry = from_json(&text, "transcript entry")?;
            if run.is_none_or(|run| entry.run == run) {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>> {
        // Sequence number n sits at index n - 1, so the events after `after` start at index
        // `after`; an index past i64 is past any list.
        let Ok(start) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let mut conn = self.connection().await?;
        let texts: Vec<String> = ::redis::cmd("LRANGE")
            .arg(self.keys.events(session))
            .arg(start)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read the events of {session}")))?;
        Ok((after + 1..).zip(texts).collect())
    }

    async fn pending(&self, session: &str) -> StoreResult<Vec<PendingTask>> {
        let mut conn = self.connection().await?;
        let (order, tasks) = ordered_values(
            &mut conn,
            self.keys.pending(session),
            self.keys.pending_order(session),
            format!("read pending tasks of {session}"),
        )
        .await?;
        let mut tasks: Vec<PendingTask> = in_order(order, tasks, "pending task")?;
        // Stable, so tasks created in the same millisecond keep their commit order.
        tasks.sort_by_key(|task| task.created_at_ms);
        Ok(tasks)
    }

    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()> {
        let keys = &self.keys;
        let session = entry.session.as_str();
        let text = to_json(&entry)?;
        let mut conn = self.connection().await?;
        let _: i64 = ::redis::cmd("EVAL")
            .arg(JOURNAL_BEGIN)
            .arg(3)
            .arg(keys.session(session))
            .arg(keys.journal(session))
            .arg(keys.journal_order(session))
            .arg(&entry.id)
            .arg(text)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!(
                "journal call {} of {session}",
                entry.tool_call_id
            )))?;
        Ok(())
    }

    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>> {
        let mut conn = self.connection().await?;
        let (order, entries) = ordered_values(
            &mut conn,
            self.keys.journal(session),
            self.keys.journal_order(session),
            format!("read the call journal of {session}"),
        )
        .await?;
        let mut entries: Vec<JournalEntry> = in_order(order, entries, "journal entry")?;
        // Stable: entries begun in the same millisecond keep their order.
        entries.sort_by_key(|entry| entry.started_ms);
        Ok(entries)
    }
}
