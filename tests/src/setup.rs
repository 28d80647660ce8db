//! Starting points shared by the end-to-end tests: a federation whose test namespace is
//! already federated to (and present in) every member.

use crate::{
    federation::{Federation, federated_namespace, federation},
    wait::wait_namespace_in,
};

/// A federation with `members` members and namespace `ns` federated to all of them, the
/// namespace present in each member.
pub async fn federation_with_namespace(members: usize, ns: &str) -> anyhow::Result<Federation> {
    let fed = federation(members).await?;
    federated_namespace(&fed, ns).await?;
    wait_namespace_in(&fed.members, ns).await?;
    Ok(fed)
}
