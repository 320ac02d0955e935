//! The parts of the `dsh` command that other crates drive directly: the
//! ACP stdio transport and the typed reading of its messages, which the
//! fuzz targets exercise without a process. Not a stable API: the `dsh`
//! binary is the product.

/// `dsh acp`'s wire layer (the server itself lives in the binary).
pub mod acp {
    pub mod rpc;
    pub mod wire;
}
