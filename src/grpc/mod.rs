//! gRPC over HTTP/2 on unix sockets, synchronous, for KubeVirt's
//! virt-handler. So far its header compression: [`huffman`] and
//! [`hpack`].

pub mod hpack;
pub mod huffman;
