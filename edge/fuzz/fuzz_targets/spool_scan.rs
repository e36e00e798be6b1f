#![no_main]
use edge::spool::scan::scan_segment;

// The recovery scanner over arbitrary bytes: every record it yields re-encodes to exactly
// the bytes it came from (but the length field of one read at its payload's own length), records and damaged regions follow one another without
// overlapping, inside the bytes, and without a tail only preallocated zeros follow them.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let scan = scan_segment(data);
    let Ok(format) = scan.format else {
        assert!(scan.records.is_empty());
        return;
    };
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for scanned in &scan.records {
        let mut frame = Vec::new();
        assert_eq!(
            scanned.record.encode_frame(&format, &mut frame),
            Ok(scanned.len)
        );
        let stored = &data[scanned.offset..scanned.offset + scanned.len];
        if scanned.repaired {
            // Read at its payload's own length: all but the stored length is as written.
            assert_ne!(stored[..4], frame[..4]);
            assert_eq!(stored[4..], frame[4..]);
        } else {
            assert_eq!(stored, &frame[..]);
        }
        spans.push((scanned.offset, scanned.len));
    }
    spans.extend(scan.damaged.iter().map(|d| (d.offset, d.len)));
    spans.sort();
    let mut at = format.header_len();
    for (offset, len) in spans {
        assert!(offset >= at, "overlap at {offset}");
        at = offset + len;
    }
    assert!(at <= scan.end && scan.end <= data.len().max(format.header_len()));
    if scan.tail.is_none() {
        assert!(
            data.get(scan.end..)
                .unwrap_or_default()
                .iter()
                .all(|&b| b == 0)
        );
    }
});
