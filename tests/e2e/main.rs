//! The end-to-end tests: the `tally` binary run as a user runs it, on the embedded backend and
//! on the local AWS API peers (`--features aws-local`; `scripts/test.sh` starts them), with exact
//! expected counts. One test binary: it is linked once, and its tests run a few at a time across
//! all the files below (`RUST_TEST_THREADS`, 4 in `scripts/test.sh`), so the long ones overlap.
//! `cargo test --test e2e harness::` runs one file's tests.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

mod aws_stack;
mod change_stream;
mod crash_recovery;
mod edges;
mod fan_out;
mod faults;
mod first_hour;
mod first_week;
mod fleet;
mod harness;
mod in_process;
mod kpl;
mod likers;
mod likers_chaos;
mod likers_faults;
mod openapi;
mod pipeline;
mod read_contract;
mod readers;
mod rebuild;
mod regions;
mod resharding;
mod retention;
mod sending;
mod serve;
mod structure;
mod terraform;
mod verify;
