//! A progress line that redraws itself in place (`12/40 propagated`), shown only when the
//! output is a terminal: piped or captured output stays free of carriage returns and
//! escape codes. It owns nothing but that line.

use super::Output;

/// Carriage return and "erase the line" (ANSI EL 2).
const ERASE_LINE: &str = "\r\x1b[2K";

/// `done/total propagated`, with the pending count when any.
pub fn propagated_line(done: usize, total: usize) -> String {
    let pending = total.saturating_sub(done);
    if pending == 0 {
        format!("{done}/{total} propagated")
    } else {
        format!("{done}/{total} propagated, {pending} pending")
    }
}

/// The in-place progress line of one command.
pub struct Progress {
    out: Output,
    enabled: bool,
}

impl Progress {
    /// A progress line on `out`, drawn only when `out` is a terminal.
    pub fn new(out: &Output) -> Self {
        Progress {
            enabled: out.is_terminal(),
            out: out.clone(),
        }
    }

    /// Replaces the line with `text`.
    pub fn show(&self, text: &str) {
        if self.enabled {
            self.out.write(format!("{ERASE_LINE}{text}"));
        }
    }

    /// Erases the line, before the command prints its results.
    pub fn clear(&self) {
        if self.enabled {
            self.out.write(ERASE_LINE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_propagated_and_pending_objects() {
        assert_eq!(propagated_line(12, 40), "12/40 propagated, 28 pending");
        assert_eq!(propagated_line(3, 3), "3/3 propagated");
    }

    #[test]
    fn captured_output_gets_no_progress_line() {
        let out = Output::captured();
        let progress = Progress::new(&out);
        progress.show("1/2 propagated");
        progress.clear();
        assert_eq!(out.text(), "");
    }
}
