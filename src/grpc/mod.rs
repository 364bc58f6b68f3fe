//! gRPC over HTTP/2 on unix sockets, synchronous, for KubeVirt's
//! virt-handler. So far its header compression ([`huffman`], [`hpack`]),
//! HTTP/2's frames ([`frame`]) and flow-control windows ([`flow`]).

pub mod flow;
pub mod frame;
pub mod hpack;
pub mod huffman;
