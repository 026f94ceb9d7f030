//! Progress on stderr for long work (`produce`, `replay`, `record`, `--until-idle`): a bar with
//! rate and ETA when the size is known, a counter when it is not, nothing when stderr is not a
//! terminal. Log lines written meanwhile go around the bar instead of through it.

use std::io::Write;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar being drawn, if any: the log writer suspends it for each line.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A progress bar (`len` known) or counter of `unit`s on stderr; hidden when `quiet` or stderr
/// is not a terminal. End it with [`finish`].
pub fn start(len: Option<u64>, unit: &str, quiet: bool) -> ProgressBar {
    let pb = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    pb.set_draw_target(if quiet {
        ProgressDrawTarget::hidden()
    } else {
        // indicatif draws nothing when stderr is not a terminal.
        ProgressDrawTarget::stderr()
    });
    let template = match len {
        Some(_) => format!(
            "{{spinner}} {{elapsed_precise}} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit} \
             ({{rate}}, {{eta}} left) {{msg}}"
        ),
        None => format!("{{spinner}} {{elapsed_precise}} {{human_pos}} {unit} ({{rate}}) {{msg}}"),
    };
    let style = ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "rate",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", s.per_sec());
            },
        );
    pb.set_style(style.progress_chars("=> "));
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    if let Ok(mut a) = ACTIVE.lock() {
        *a = Some(pb.clone());
    }
    pb
}

/// Clears the bar and stops routing logs around it.
pub fn finish(pb: &ProgressBar) {
    pb.finish_and_clear();
    if let Ok(mut a) = ACTIVE.lock() {
        *a = None;
    }
}

/// Where logs go: stderr, around the bar being drawn.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let active = ACTIVE.lock().ok().and_then(|a| a.clone());
        match active {
            Some(pb) => pb.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A bar as what a library run tells its progress to.
pub struct Bar<'a>(pub &'a ProgressBar);

impl tally_core::progress::Progress for Bar<'_> {
    fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    fn at(&self, place: &str) {
        self.0.set_message(place.to_owned());
    }
}
