//! An incremental Server-Sent Events parser (the WHATWG event-stream
//! format), used by the upstream HTTP clients.
//!
//! Bytes arrive in arbitrary chunks; complete events come out. Multi-line
//! `data:` fields are joined with `\n`, comments are skipped, and `id` and
//! `retry` are kept so a client can resume with `Last-Event-ID`. The
//! buffered partial line is bounded: an event stream that never ends a line
//! is an error, not unbounded memory.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; `None` means the default type, "message".
    pub event: Option<String>,
    pub data: String,
    /// The `id:` field of this event, if it had one.
    pub id: Option<String>,
    /// The `retry:` field in milliseconds, if it had one.
    pub retry: Option<u64>,
}

/// A line longer than this is a protocol error.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// The stream broke the format.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("event stream line longer than {MAX_LINE} bytes")]
pub(crate) struct LineTooLong;

/// Parser state between chunks.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    data: Vec<String>,
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    /// The previous chunk ended in `\r`; a leading `\n` belongs to it.
    after_cr: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut events = Vec::new();
        for &byte in chunk {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&String::from_utf8_lossy(&line)) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_LINE {
                        return Err(LineTooLong);
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(events)
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let id = self.id.take();
        let retry = self.retry.take();
        let event = self.event.take();
        if self.data.is_empty() {
            // An event with no data still moves the last event id on.
            return (id.is_some() || retry.is_some()).then(|| SseEvent {
                event,
                data: String::new(),
                id,
                retry,
            });
        }
        let data = std::mem::take(&mut self.data).join("\n");
        Some(SseEvent {
            event,
            data,
            id,
            retry,
        })
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        chunks
            .iter()
            .flat_map(|c| parser.push(c).unwrap())
            .collect()
    }

    #[test]
    fn parses_fields_across_chunk_boundaries() {
        let events = parse_all(&[
            b"id: 7\nevent: mess",
            b"age\ndata: {\"a\":\ndata: 1}\nretry: 1500\n",
            b"\n: keepalive\n\n",
        ]);
        assert_eq!(
            events,
            vec![SseEvent {
                event: Some("message".into()),
                data: "{\"a\":\n1}".into(),
                id: Some("7".into()),
                retry: Some(1500)
            }]
        );
    }

    #[test]
    fn priming_event_and_crlf_line_ends() {
        let events = parse_all(&[
            b"id: p1\r\ndata:\r\n\r",
            b"\nevent: endpoint\r\ndata: /message?sessionId=x\r\n\r\n",
        ]);
        assert_eq!(events.len(), 2);
        assert_eq!(
            (events[0].id.as_deref(), events[0].data.as_str()),
            (Some("p1"), "")
        );
        assert_eq!(events[1].event.as_deref(), Some("endpoint"));
        assert_eq!(events[1].data, "/message?sessionId=x");
    }

    #[test]
    fn comments_alone_dispatch_nothing() {
        assert!(parse_all(&[b": ping\n\n: ping\n\n"]).is_empty());
    }
}
