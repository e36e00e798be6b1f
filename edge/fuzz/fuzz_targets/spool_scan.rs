#![no_main]
use edge::spool::record::SEGMENT_MAGIC;
use edge::spool::scan::scan_segment;

// What recovery reads from disk after a crash: any bytes. The valid prefix is within the
// input, every record it yields encodes back to exactly the bytes it came from, and a
// scan that did not stop leaves only preallocated zeros after the prefix.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let scan = scan_segment(data);
    assert!(scan.valid_len <= data.len());
    let mut offset = SEGMENT_MAGIC.len();
    let mut frame = Vec::new();
    for (record, &len) in scan.records.iter().zip(&scan.frame_lens) {
        frame.clear();
        assert_eq!(record.encode_frame(&mut frame), Ok(len));
        assert_eq!(&frame[..], &data[offset..offset + len]);
        offset += len;
    }
    if !scan.records.is_empty() {
        assert_eq!(offset, scan.valid_len);
    }
    if scan.stop.is_none() {
        assert!(data[scan.valid_len..].iter().all(|&b| b == 0));
    }
});
