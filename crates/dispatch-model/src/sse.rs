//! Server-sent events (the WHATWG event-stream format) from arbitrary byte chunks: every
//! provider streams this way, and a parser this small is cheaper than a dependency.

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server named the event.
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Turns byte chunks, split anywhere (even inside a UTF-8 character or a CRLF), into events.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// The events completed by `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buffer[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + offset;
            // A CR at the very end may be the first half of a CRLF: wait for the next byte.
            let next = if self.buffer[end] == b'\r' {
                match self.buffer.get(end + 1) {
                    None => break,
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                }
            } else {
                end + 1
            };
            let line = String::from_utf8_lossy(&self.buffer[start..end]).into_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = next;
        }
        self.buffer.drain(..start);
        events
    }

    /// The event left open when the stream ended without its blank line (lenient: a server
    /// that closes right after its last `data:` line still gets its event read).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let rest = std::mem::take(&mut self.buffer);
        if !rest.is_empty() {
            let line = String::from_utf8_lossy(&rest).into_owned();
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            // An event without data is not dispatched (the spec), e.g. a lone `event:` line.
            return self.data.take().map(|data| SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None; // a comment, sent as a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            // `id` and `retry` matter to browsers reconnecting, not to one request.
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const STREAM: &str = ": keep-alive\r\nevent: a\r\ndata: {\"x\": \"é\"}\r\n\r\ndata: one\ndata:two\n\nevent: lone\n\ndata: [DONE]\r\r";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: Some("a".into()),
                data: "{\"x\": \"é\"}".into(),
            },
            SseEvent {
                event: None,
                data: "one\ntwo".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ]
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for split in 0..=bytes.len() {
            let mut parser = SseParser::new();
            let mut events = parser.push(&bytes[..split]);
            events.extend(parser.push(&bytes[split..]));
            events.extend(parser.finish());
            assert_eq!(events, expected(), "split at {split}");
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for b in STREAM.as_bytes() {
            events.extend(parser.push(std::slice::from_ref(b)));
        }
        events.extend(parser.finish());
        assert_eq!(events, expected());
    }

    #[test]
    fn an_event_cut_off_by_the_end_of_the_stream_is_still_read() {
        let mut parser = SseParser::new();
        assert_eq!(parser.push(b"data: last"), vec![]);
        assert_eq!(
            parser.finish(),
            Some(SseEvent {
                event: None,
                data: "last".into()
            })
        );
    }
}
