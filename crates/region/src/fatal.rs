//! Fatal messages for the few states the fault path cannot recover from
//! without handing back wrong bytes ([`Fatal`]). Async-signal-safe: the
//! message is built in a fixed buffer on the stack, written with `write(2)`,
//! and the process ends with `abort(3)`; nothing is allocated (the fault
//! path may be interrupting `malloc`).
#![allow(unsafe_code)]

/// A message for the few states the fault path cannot recover from without
/// handing back wrong bytes, built without allocating (the fault path may be
/// interrupting `malloc`): text and numbers are appended to a fixed buffer,
/// then written to stderr and the process aborts.
pub struct Fatal {
    buf: [u8; 768],
    len: usize,
}

impl Fatal {
    /// Starts the message with `zpage: `.
    pub fn new() -> Fatal {
        Fatal {
            buf: [0; 768],
            len: 0,
        }
        .text("zpage: ")
    }

    /// Appends `s` (truncated if the buffer is full).
    pub fn text(mut self, s: &str) -> Fatal {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self
    }

    /// Appends `value` in decimal.
    pub fn dec(self, mut value: u64) -> Fatal {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.text(std::str::from_utf8(&digits[i..]).unwrap_or("?"))
    }

    /// Appends `value` as `0x...` hexadecimal.
    pub fn hex(self, value: u64) -> Fatal {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for (i, digit) in digits[2..].iter_mut().enumerate() {
            let nibble = (value >> (60 - 4 * i)) & 0xf;
            *digit = b"0123456789abcdef"[nibble as usize];
        }
        self.text(std::str::from_utf8(&digits).unwrap_or("?"))
    }

    /// The message so far (for tests).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    /// Writes the message and a newline to stderr, and goes on.
    pub fn print(self) {
        let this = self.text("\n");
        // SAFETY: write(2) is async-signal-safe; the buffer is live.
        unsafe { libc::write(2, this.buf.as_ptr().cast(), this.len) };
    }

    /// Writes the message and a newline to stderr and aborts.
    pub fn abort(self) -> ! {
        let this = self.text("\n");
        // SAFETY: write(2) and abort(3) are async-signal-safe; the buffer is live.
        unsafe {
            libc::write(2, this.buf.as_ptr().cast(), this.len);
            libc::abort()
        }
    }
}

impl Default for Fatal {
    fn default() -> Self {
        Fatal::new()
    }
}

impl std::fmt::Debug for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_messages_format_numbers_without_allocating() {
        let message = Fatal::new()
            .text("page ")
            .dec(1234)
            .text(" at ")
            .hex(0xdead_beef);
        assert_eq!(message.as_str(), "zpage: page 1234 at 0x00000000deadbeef");
        assert_eq!(Fatal::new().dec(0).as_str(), "zpage: 0");
        assert_eq!(
            Fatal::new().dec(u64::MAX).as_str(),
            "zpage: 18446744073709551615"
        );
    }
}
