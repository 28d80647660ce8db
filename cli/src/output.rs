//! Where command results go: stdout for the binary, a shared buffer for in-process tests.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex};

/// A sink for a command's results (not its logs, which go to stderr through `tracing`).
#[derive(Clone, Debug)]
pub struct Output {
    buffer: Option<Arc<Mutex<String>>>,
}

impl Output {
    /// Writes to stdout.
    pub fn stdout() -> Self {
        Output { buffer: None }
    }

    /// Collects everything written; read it with [`Output::text`].
    pub fn captured() -> Self {
        Output {
            buffer: Some(Arc::new(Mutex::new(String::new()))),
        }
    }

    /// Writes `text` as is.
    pub fn write(&self, text: impl AsRef<str>) {
        let text = text.as_ref();
        match &self.buffer {
            // A poisoned lock only means another writer panicked; the text is still valid.
            Some(b) => b.lock().unwrap_or_else(|e| e.into_inner()).push_str(text),
            None => {
                let mut out = std::io::stdout().lock();
                // A closed stdout (`flotilla status | head`) is not worth failing a command.
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
        }
    }

    /// Writes `text` and a newline.
    pub fn line(&self, text: impl AsRef<str>) {
        self.write(format!("{}\n", text.as_ref()));
    }

    /// Whether results go to a terminal (stdout is a TTY; never for captured output).
    pub fn is_terminal(&self) -> bool {
        self.buffer.is_none() && std::io::stdout().is_terminal()
    }

    /// Everything captured so far (empty for stdout).
    pub fn text(&self) -> String {
        match &self.buffer {
            Some(b) => b.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_output_is_shared_between_clones() {
        let out = Output::captured();
        let clone = out.clone();
        clone.line("a");
        out.write("b");
        assert_eq!(out.text(), "a\nb");
    }
}
