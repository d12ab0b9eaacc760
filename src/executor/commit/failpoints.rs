//! The commit steps a fail point splits (see [`crate::failpoint`]): PREPARE and COMMIT PREPARED
//! go to every participant at once, so "done on some, not yet sent to the others" is a step
//! only when a point is armed there; then the first participant goes alone, the point fires,
//! and the rest follow together. Without an armed point (and always without the feature) they
//! are the plain calls.

use super::Commit;
use crate::backend::BackendError;
use crate::executor::participants::Answer;
use crate::failpoint::FailPoint;
use crate::model::ShardId;
use crate::txn::Gid;

impl Commit<'_> {
    /// [`ParkedLinks::ask_with`] over `at`, split around `point`.
    ///
    /// [`ParkedLinks::ask_with`]: crate::executor::participants::ParkedLinks::ask_with
    pub(super) async fn ask_split(
        &mut self,
        at: &[usize],
        sql_of: &(dyn Fn(ShardId) -> String + Sync),
        point: FailPoint,
    ) -> Result<Vec<Answer>, BackendError> {
        if at.len() > 1 && self.failpoints.is_armed(point) {
            let mut answers = self.links.parked.ask_with(&at[..1], sql_of).await?;
            crate::failpoint::fail_point!(self.failpoints, point);
            answers.extend(self.links.parked.ask_with(&at[1..], sql_of).await?);
            return Ok(answers);
        }
        self.links.parked.ask_with(at, sql_of).await
    }

    /// [`Commit::finish_prepared`] over `participants`, split around `point`.
    pub(super) async fn finish_prepared_split(
        &mut self,
        participants: &[usize],
        gid: &Gid,
        verb: &str,
        point: FailPoint,
    ) -> Result<Vec<ShardId>, BackendError> {
        if participants.len() > 1 && self.failpoints.is_armed(point) {
            let mut unconfirmed = self.finish_prepared(&participants[..1], gid, verb).await?;
            crate::failpoint::fail_point!(self.failpoints, point);
            unconfirmed.extend(self.finish_prepared(&participants[1..], gid, verb).await?);
            return Ok(unconfirmed);
        }
        self.finish_prepared(participants, gid, verb).await
    }
}
