//! The subcommands: thin adapters from their arguments to the rooms that do the work (the
//! pipeline's crates, `tally_serve`, `tally_verify`, `tally_recording`). Each takes the loaded settings and the wired
//! backend. Nothing imports this module but the dispatcher (`tally::run`).

pub mod backfill;
pub mod consume;
pub mod demo;
pub mod ingest;
pub mod produce;
pub mod read;
pub mod rebuild;
pub mod serve;
pub mod setup;
pub mod up;
pub mod verify;
