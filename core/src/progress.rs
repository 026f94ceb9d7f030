//! How far a long run has come, told to whoever shows it: the command line draws a bar; a
//! program that shows nothing passes `&()`.

/// Told of the work as it is done.
pub trait Progress: Sync {
    /// `n` more units done.
    fn inc(&self, n: u64);
    /// Where the work is, in words (a recording's time reached), shown beside the count.
    fn at(&self, _place: &str) {}
}

/// Shows nothing.
impl Progress for () {
    fn inc(&self, _: u64) {}
}
