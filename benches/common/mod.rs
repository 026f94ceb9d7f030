//! What the benches share: the core's workload and passes (`fold`, used by `core` and
//! `interleaved`), a worker's board with its windows open (`board`), and running `tally` against a store (`stack`, used by the benches that time
//! the binary on the embedded store and on the local AWS peers). Each bench uses part of it.
#![allow(dead_code)]

pub mod board;
pub mod fold;
pub mod rounds;
pub mod stack;

#[allow(unused_imports)] // the benches that time the binary fold nothing
pub use fold::*;
