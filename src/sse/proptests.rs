//! Property tests for [`SseParser`]: arbitrary bytes in arbitrary chunkings
//! never panic, chunking never changes the events or the error, well-formed
//! streams round-trip, and an over-long line is [`LineTooLong`].

use proptest::prelude::*;

use super::*;

/// Bytes that make up most of an event stream, plus bytes that break it.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"data:".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"event:".to_vec()),
        Just(b"id:".to_vec()),
        Just(b"retry:".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\0".to_vec()),
        Just(vec![0xff]),
        Just("é".as_bytes().to_vec()),
        Just(vec![0xc3]),
        "[0-9]{1,20}".prop_map(String::into_bytes),
        "[a-z]{1,5}".prop_map(String::into_bytes),
    ];
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        proptest::collection::vec(token, 0..64).prop_map(|t| t.concat()),
    ]
}

/// Split points into `0..=len`, sorted; duplicates give empty chunks.
fn chunks(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in at {
        out.push(bytes[start..cut].to_vec());
        start = cut;
    }
    out.push(bytes[start..].to_vec());
    out
}

/// Feeds chunks until one fails: the events returned before it, and the error.
fn feed<C: AsRef<[u8]>>(chunks: &[C]) -> (Vec<SseEvent>, Option<LineTooLong>) {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    for chunk in chunks {
        match parser.push(chunk.as_ref()) {
            Ok(more) => events.extend(more),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

/// One event as a well-formed stream writes it.
#[derive(Debug, Clone)]
struct Written {
    event: Option<String>,
    data: Option<Vec<String>>,
    id: Option<String>,
    retry: Option<u64>,
    comment: bool,
}

/// Field values: no line ends; NUL only where the field allows it.
fn value() -> impl Strategy<Value = String> {
    "[^\r\n]{0,12}"
}

fn written() -> impl Strategy<Value = Written> {
    (
        proptest::option::of(value()),
        proptest::option::of(proptest::collection::vec(value(), 1..4)),
        proptest::option::of("[^\r\n\0]{0,12}"),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_map(|(event, data, id, retry, comment)| Written {
            event,
            data,
            id,
            retry,
            comment,
        })
}

/// The stream text for `events`, each line ended by one of `\n`, `\r`, `\r\n`.
fn render(events: &[Written], ends: &[prop::sample::Index]) -> Vec<u8> {
    const ENDS: [&str; 3] = ["\n", "\r", "\r\n"];
    let mut lines = Vec::new();
    for e in events {
        if e.comment {
            lines.push(": keep-alive".to_owned());
        }
        if let Some(id) = &e.id {
            lines.push(format!("id: {id}"));
        }
        if let Some(event) = &e.event {
            lines.push(format!("event: {event}"));
        }
        for d in e.data.iter().flatten() {
            lines.push(format!("data: {d}"));
        }
        if let Some(retry) = e.retry {
            lines.push(format!("retry: {retry}"));
        }
        lines.push(String::new());
    }
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        out.extend_from_slice(line.as_bytes());
        let mut end = ENDS[ends.get(i).map_or(0, |x| x.index(ENDS.len()))];
        // After a lone `\r`, a `\n` would only complete that line end.
        if line.is_empty() && end == "\n" && out.len() > 1 && out[out.len() - 1] == b'\r' {
            end = "\r\n";
        }
        out.extend_from_slice(end.as_bytes());
    }
    out
}

/// What the parser should dispatch for `events`.
fn expected(events: &[Written]) -> Vec<SseEvent> {
    events
        .iter()
        .filter(|e| e.data.is_some() || e.id.is_some() || e.retry.is_some())
        .map(|e| SseEvent {
            event: e.event.clone(),
            data: e.data.as_ref().map(|d| d.join("\n")).unwrap_or_default(),
            id: e.id.clone(),
            retry: e.retry,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn chunking_never_changes_the_events(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let whole = feed(&[&bytes]);
        prop_assert_eq!(&feed(&chunks(&bytes, &cuts)), &whole);
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(&feed(&bytewise), &whole);
    }

    #[test]
    fn well_formed_streams_round_trip(
        events in proptest::collection::vec(written(), 0..6),
        ends in proptest::collection::vec(any::<prop::sample::Index>(), 0..64),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let bytes = render(&events, &ends);
        let (got, error) = feed(&chunks(&bytes, &cuts));
        prop_assert_eq!(error, None);
        prop_assert_eq!(got, expected(&events));
    }
}

proptest! {
    // Each case pushes more than MAX_LINE (16 MiB) bytes through the parser,
    // about half a second in a debug build.
    #![proptest_config(ProptestConfig { cases: 2, ..ProptestConfig::default() })]

    #[test]
    fn a_line_over_the_cap_is_line_too_long_however_chunked(
        before in stream_bytes(),
        over in 1..64usize,
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        // A complete line first, so the long line starts on a fresh one.
        let mut bytes = before;
        bytes.push(b'\n');
        let start = bytes.len();
        bytes.resize(start + MAX_LINE + over, b'x');
        bytes.extend_from_slice(b"\n\n");
        let (prefix_events, prefix_error) = feed(&[&bytes[..start]]);
        prop_assert_eq!(prefix_error, None);

        let (events, error) = feed(&chunks(&bytes, &cuts));
        prop_assert_eq!(error, Some(LineTooLong));
        // Only events completed in chunks before the failing one come out.
        prop_assert!(prefix_events.starts_with(&events));
    }
}

#[test]
fn a_line_at_the_cap_is_accepted_and_one_byte_more_is_not() {
    let mut parser = SseParser::default();
    let mut at_cap = b"data:".to_vec();
    at_cap.resize(MAX_LINE, b'x');
    at_cap.extend_from_slice(b"\n\n");
    let events = parser.push(&at_cap).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data.len(), MAX_LINE - "data:".len());
    assert_eq!(parser.push(&vec![b'x'; MAX_LINE + 1]), Err(LineTooLong));
}
