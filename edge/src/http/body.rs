//! The body types of the edge's HTTP answers, shared by the request path and the
//! connection code that serves it.

use bytes::Bytes;
use http_body_util::Full;

/// Every answer is small and whole when it is sent.
pub(crate) type ResponseBody = Full<Bytes>;
