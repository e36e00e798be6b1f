//! The commands an operator runs against a PoP's spool directory beside the running
//! edge (`edge dead-letter …`, `edge quarantine …`, `edge backhaul …`, `edge replay`):
//! each reads the spool's files through the spool's own API and prints JSON lines on
//! stdout, a summary on stderr.

pub mod backhaul;
pub mod dead_letter;
pub mod quarantine;
pub mod ranges;
pub mod replay;

use base64::Engine as _;
use edge_kit::process::print_line;

use crate::spool::record::Record;

/// `record` as one JSON object: its fields (`delivery_id` is the provider's own id inside
/// the stored key), and with `contents` its headers and body (as text when it is UTF-8,
/// else as `body_base64`).
pub fn record_json(record: &Record, contents: bool) -> serde_json::Value {
    let mut line = serde_json::json!({
        "seq": record.seq,
        "received_ms": record.received_ms,
        "early": record.early,
        "pop": record.pop,
        "route": record.route,
        "event_id": record.event_id,
        "delivery_id": crate::event::id_of_key(&record.event_id),
        "body_len": record.body.len(),
    });
    if contents {
        let headers: serde_json::Map<String, serde_json::Value> = record
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), String::from_utf8_lossy(value).into()))
            .collect();
        line["headers"] = headers.into();
        match std::str::from_utf8(&record.body) {
            Ok(text) => line["body"] = text.into(),
            Err(_) => {
                line["body_base64"] = base64::engine::general_purpose::STANDARD
                    .encode(&record.body)
                    .into()
            }
        }
    }
    line
}

/// Prints `value` as one line of standard output.
fn print_json(value: &serde_json::Value) -> std::io::Result<()> {
    print_line(&value.to_string())
}
