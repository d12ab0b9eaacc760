//! Fail points: named steps of the commit protocols where a crash test makes the proxy die or
//! stop, so it can check that recovery settles whatever the proxy left behind.
//!
//! They exist only in builds with the cargo feature `failpoints` (the test command enables it):
//! without it `fail_point!` expands to nothing and [`FailPoints`] holds nothing, so a release
//! build carries neither the checks nor the code behind them.
//!
//! Which point does what comes from the environment variable `SHARDWIRE_FAILPOINTS`, read once
//! when the proxy starts ([`FailPoints::from_env`]) and handed down explicitly (the accept loop's
//! `Deps`, then the sessions' shared context and the coordinator): no global state, so several
//! proxies in one process each keep their own. The value is `point=action`
//! pairs separated by `;`:
//!
//! ```text
//! SHARDWIRE_FAILPOINTS="commit.after_decision=kill"
//! SHARDWIRE_FAILPOINTS="commit.between_commit_prepared=pause(/tmp/x/paused);ddl.after_decision=sleep(500)"
//! ```
//!
//! Actions:
//! - `kill`: the process sends itself SIGKILL at that step: no cleanup, no flush, no unwinding,
//!   exactly what an operator's `kill -9` does.
//! - `pause(PATH)`: creates the file PATH (it holds the point's name), logs that it is paused,
//!   and waits until someone removes PATH. A test waits for the file, acts (stops a shard, …)
//!   while the step is held, then removes it to let the step go on.
//! - `sleep(MS)`: waits MS milliseconds.
//!
//! Adding a point: a variant of [`FailPoint`] with its name in [`FailPoint::name`] and
//! [`FailPoint::ALL`], then one line at the step:
//! `crate::failpoint::fail_point!(ctx.failpoints, FailPoint::Name);` (inside an async fn; any
//! expression of type [`FailPoints`] works, e.g. `coordinator.failpoints()`).

#[cfg(feature = "failpoints")]
use std::path::PathBuf;
#[cfg(feature = "failpoints")]
use std::sync::Arc;
#[cfg(feature = "failpoints")]
use std::time::Duration;

use std::future::Future;

/// The environment variable that arms fail points.
pub const ENV_VAR: &str = "SHARDWIRE_FAILPOINTS";

/// A step where a fail point can fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPoint {
    /// A client's COMMIT over several shards: the first participant answered its PREPARE
    /// TRANSACTION, the others have not been sent theirs (the point splits the parallel PREPARE).
    CommitAfterFirstPrepare,
    /// A client's COMMIT: the commit record is durable, no COMMIT PREPARED sent yet.
    CommitAfterDecision,
    /// A client's COMMIT: the first participant confirmed COMMIT PREPARED, the others have not
    /// been sent theirs.
    CommitBetweenCommitPrepared,
    /// The same three steps in the coordinator's own transactions (multi-shard DDL).
    DdlAfterFirstPrepare,
    DdlAfterDecision,
    DdlBetweenCommitPrepared,
    /// Row movement of a table family, between moving the root row and its children. Reserved:
    /// the movement code places the call.
    MoveMidFamily,
    /// A chunk move: the target has copied the chunk, no cutover tried yet.
    ChunkMoveAfterCopy,
    /// A chunk move's cutover: the target's attach and the source's removal are prepared
    /// (two-phase), the catalog has not given the chunk to the target.
    ChunkMoveBeforeHandOver,
    /// A chunk move's cutover: the catalog gave the chunk to the target, neither shard's
    /// prepared half is committed.
    ChunkMoveAfterHandOver,
    /// A chunk split: the shard's re-placement is prepared (two-phase), the catalog's chunk
    /// map does not have the halves yet.
    ChunkSplitBeforeRecord,
}

impl FailPoint {
    pub const ALL: [FailPoint; 11] = [
        FailPoint::CommitAfterFirstPrepare,
        FailPoint::CommitAfterDecision,
        FailPoint::CommitBetweenCommitPrepared,
        FailPoint::DdlAfterFirstPrepare,
        FailPoint::DdlAfterDecision,
        FailPoint::DdlBetweenCommitPrepared,
        FailPoint::MoveMidFamily,
        FailPoint::ChunkMoveAfterCopy,
        FailPoint::ChunkMoveBeforeHandOver,
        FailPoint::ChunkMoveAfterHandOver,
        FailPoint::ChunkSplitBeforeRecord,
    ];

    /// The name `SHARDWIRE_FAILPOINTS` uses.
    pub fn name(self) -> &'static str {
        match self {
            FailPoint::CommitAfterFirstPrepare => "commit.after_first_prepare",
            FailPoint::CommitAfterDecision => "commit.after_decision",
            FailPoint::CommitBetweenCommitPrepared => "commit.between_commit_prepared",
            FailPoint::DdlAfterFirstPrepare => "ddl.after_first_prepare",
            FailPoint::DdlAfterDecision => "ddl.after_decision",
            FailPoint::DdlBetweenCommitPrepared => "ddl.between_commit_prepared",
            FailPoint::MoveMidFamily => "move.mid_family",
            FailPoint::ChunkMoveAfterCopy => "chunk_move.after_copy",
            FailPoint::ChunkMoveBeforeHandOver => "chunk_move.before_hand_over",
            FailPoint::ChunkMoveAfterHandOver => "chunk_move.after_hand_over",
            FailPoint::ChunkSplitBeforeRecord => "chunk_split.before_record",
        }
    }

    pub fn named(name: &str) -> Option<FailPoint> {
        FailPoint::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for FailPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `SHARDWIRE_FAILPOINTS` the proxy cannot obey; it refuses to start rather than run a test
/// that would then prove nothing.
#[derive(Debug, thiserror::Error)]
pub enum FailPointError {
    #[error(
        "{ENV_VAR} is set, but this build has no fail points (build with --features failpoints)"
    )]
    NotCompiledIn,
    #[error("{ENV_VAR}: `{entry}` is not point=action")]
    Malformed { entry: String },
    #[error("{ENV_VAR}: unknown fail point `{name}` (known: {known})")]
    UnknownPoint { name: String, known: String },
    #[error("{ENV_VAR}: unknown action `{action}` for {point} (kill, pause(PATH), sleep(MS))")]
    UnknownAction { point: FailPoint, action: String },
}

/// What a fail point does when reached.
#[cfg(feature = "failpoints")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Kill,
    Pause(PathBuf),
    Sleep(Duration),
}

/// The armed fail points of one proxy; cheap to clone. Without the feature it is empty and
/// every method is a no-op the compiler removes.
#[derive(Debug, Clone, Default)]
pub struct FailPoints {
    #[cfg(feature = "failpoints")]
    armed: Arc<[(FailPoint, Action)]>,
}

impl FailPoints {
    /// No point armed.
    pub fn none() -> FailPoints {
        FailPoints::default()
    }

    /// The points `SHARDWIRE_FAILPOINTS` arms; none when it is unset or empty.
    pub fn from_env() -> Result<FailPoints, FailPointError> {
        match std::env::var(ENV_VAR) {
            Ok(spec) if !spec.trim().is_empty() => FailPoints::parse(&spec),
            _ => Ok(FailPoints::none()),
        }
    }

    /// Parses a `SHARDWIRE_FAILPOINTS` value.
    #[cfg(not(feature = "failpoints"))]
    pub fn parse(_spec: &str) -> Result<FailPoints, FailPointError> {
        Err(FailPointError::NotCompiledIn)
    }

    /// Parses a `SHARDWIRE_FAILPOINTS` value.
    #[cfg(feature = "failpoints")]
    pub fn parse(spec: &str) -> Result<FailPoints, FailPointError> {
        let mut armed = Vec::new();
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let malformed = || FailPointError::Malformed {
                entry: entry.to_string(),
            };
            let (name, action) = entry.split_once('=').ok_or_else(malformed)?;
            let name = name.trim();
            let point = FailPoint::named(name).ok_or_else(|| FailPointError::UnknownPoint {
                name: name.to_string(),
                known: FailPoint::ALL.map(FailPoint::name).join(", "),
            })?;
            let action =
                parse_action(action.trim()).ok_or_else(|| FailPointError::UnknownAction {
                    point,
                    action: action.trim().to_string(),
                })?;
            armed.retain(|(p, _)| *p != point);
            armed.push((point, action));
        }
        Ok(FailPoints {
            armed: armed.into(),
        })
    }

    /// Whether `point` would do anything; always false without the feature.
    #[inline(always)]
    pub fn is_armed(&self, point: FailPoint) -> bool {
        #[cfg(feature = "failpoints")]
        return self.armed.iter().any(|(p, _)| *p == point);
        #[cfg(not(feature = "failpoints"))]
        {
            let _ = point;
            false
        }
    }

    /// Does what `point` is armed with, if anything. Call it through [`fail_point!`], which
    /// removes the call from builds without the feature.
    #[cfg(feature = "failpoints")]
    pub async fn hit(&self, point: FailPoint) {
        let Some((_, action)) = self.armed.iter().find(|(p, _)| *p == point) else {
            return;
        };
        match action {
            Action::Kill => {
                tracing::warn!(%point, "fail point reached: killing the process (SIGKILL)");
                kill_self()
            }
            Action::Sleep(pause) => {
                tracing::warn!(%point, ?pause, "fail point reached: sleeping");
                tokio::time::sleep(*pause).await;
            }
            Action::Pause(marker) => {
                // Written before the log line, so whoever sees the line also finds the file.
                if let Err(e) = std::fs::write(marker, point.name()) {
                    tracing::error!(%point, marker = %marker.display(), error = %e, "fail point cannot create its marker; not pausing");
                    return;
                }
                tracing::warn!(%point, marker = %marker.display(), "fail point reached: paused until the marker is removed");
                while marker.exists() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tracing::warn!(%point, "fail point released");
            }
        }
    }

    /// Runs `futures` together, as `join_all` does; when `point` is armed, runs the first alone,
    /// then fires `point`, then the rest together, so that the step "some participants done,
    /// others not started" exists for the fail point to stop at.
    // A plain fn: an async fn would keep the caller's iterator (closures over borrows) in its
    // state, which defeats the `Send` proof of the session futures that await it.
    pub fn join_all<F: Future>(
        &self,
        point: FailPoint,
        futures: impl IntoIterator<Item = F>,
    ) -> impl Future<Output = Vec<F::Output>> {
        #[cfg(feature = "failpoints")]
        {
            let mut futures: Vec<F> = futures.into_iter().collect();
            let armed = self.is_armed(point).then(|| self.clone());
            async move {
                let Some(failpoints) = armed else {
                    return futures::future::join_all(futures).await;
                };
                let mut done = Vec::with_capacity(futures.len());
                if !futures.is_empty() {
                    done.push(futures.remove(0).await);
                }
                failpoints.hit(point).await;
                done.extend(futures::future::join_all(futures).await);
                done
            }
        }
        #[cfg(not(feature = "failpoints"))]
        {
            let _ = point;
            futures::future::join_all(futures)
        }
    }
}

#[cfg(feature = "failpoints")]
fn parse_action(action: &str) -> Option<Action> {
    if action == "kill" {
        return Some(Action::Kill);
    }
    let (verb, arg) = action.strip_suffix(')')?.split_once('(')?;
    match verb.trim() {
        "pause" if !arg.trim().is_empty() => Some(Action::Pause(PathBuf::from(arg.trim()))),
        "sleep" => arg
            .trim()
            .parse()
            .ok()
            .map(|ms| Action::Sleep(Duration::from_millis(ms))),
        _ => None,
    }
}

#[cfg(feature = "failpoints")]
fn kill_self() -> ! {
    // SIGKILL rather than abort(): no core dump, no atexit handlers, no signal a runtime could
    // catch; the process is gone in the middle of the step, as after an external kill -9.
    // SAFETY: kill(2) on our own pid touches no memory of ours.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // Not reached: a signal a process sends itself is delivered before kill(2) returns.
    std::process::abort()
}

/// Fires a fail point: `fail_point!(failpoints, FailPoint::CommitAfterDecision)` in an async
/// fn, where `failpoints` is a [`FailPoints`]. Expands to nothing without the `failpoints`
/// feature: neither argument is even evaluated.
macro_rules! fail_point {
    ($failpoints:expr, $point:expr) => {{
        #[cfg(feature = "failpoints")]
        $crate::failpoint::FailPoints::hit(&$failpoints, $point).await;
    }};
}
pub(crate) use fail_point;

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn parses_points_and_actions() {
        let fp = FailPoints::parse(
            " commit.after_decision = kill ; ddl.after_decision=sleep(5);commit.between_commit_prepared=pause(/tmp/m)",
        )
        .expect("valid");
        assert!(fp.is_armed(FailPoint::CommitAfterDecision));
        assert!(fp.is_armed(FailPoint::DdlAfterDecision));
        assert!(!fp.is_armed(FailPoint::CommitAfterFirstPrepare));
        assert_eq!(
            fp.armed.last().map(|(_, a)| a.clone()),
            Some(Action::Pause(PathBuf::from("/tmp/m")))
        );
    }

    #[test]
    fn refuses_what_it_cannot_obey() {
        for bad in [
            "commit.after_decision",
            "commit.after_lunch=kill",
            "commit.after_decision=explode",
            "commit.after_decision=sleep(soon)",
            "commit.after_decision=pause()",
        ] {
            assert!(FailPoints::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn join_all_runs_the_first_before_the_point_and_the_rest_after() {
        let dir = tempfile::tempdir().expect("temp dir");
        let marker = dir.path().join("paused");
        let fp = FailPoints::parse(&format!("move.mid_family=pause({})", marker.display()))
            .expect("valid");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let shared = order.clone();
        let steps = (0..3).map(move |i| {
            let order = shared.clone();
            async move {
                order.lock().unwrap().push(i);
                i
            }
        });
        let joined = tokio::spawn(fp.join_all(FailPoint::MoveMidFamily, steps));
        while !marker.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(*order.lock().unwrap(), vec![0]);
        std::fs::remove_file(&marker).expect("release the point");
        assert_eq!(joined.await.expect("joined"), vec![0, 1, 2]);
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    }
}
