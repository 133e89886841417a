//! The run lifecycle on Docker: images, the per-run network, the proxy and sandbox
//! containers, teardown guards, `gc`.

pub mod images;
