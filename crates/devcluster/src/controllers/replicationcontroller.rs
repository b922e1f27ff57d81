//! ReplicationControllers (core/v1), run as kube-controller-manager runs them: by the
//! ReplicaSet controller's code for another kind (pkg/controller/replication is a thin wrapper
//! of pkg/controller/replicaset), here `replicaset::Replicated` with the RC's names.

use super::replicaset::Replicated;
use super::{Controller, Key};
use crate::cluster::Cluster;
use crate::store::Change;
use std::time::Duration;

const RCS: Replicated = Replicated {
    group: "",
    resource: "replicationcontrollers",
    kind: "ReplicationController",
    manager: "replication-controller",
};

pub struct ReplicationManager;

impl Controller for ReplicationManager {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        RCS.keys_for(c, out);
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        RCS.all_keys(cl, out);
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        RCS.reconcile(cl, key)
    }
}
