//! KubeVirt's own launcher protocol, the second front end beside the JSON
//! socket (issue 27): the messages virt-handler and the launcher exchange.

pub mod api;
pub mod proto;
