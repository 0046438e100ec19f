//! A minimal HTTP/1.1 `GET` over plain TCP for the telemetry pollers: engines serve
//! `/metrics` and `/v1/loads` on their internal HTTP port. One request per connection
//! (`Connection: close`); `Content-Length`, chunked and read-to-close bodies; no TLS, no
//! redirects. Bodies over 16 MiB are refused.

use core::fmt;
use core::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest body accepted (bytes).
pub const MAX_BODY: usize = 16 << 20;

/// Why a `GET` brought no body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL is not `http://host[:port][/path]`.
    BadUrl(String),
    /// Connecting, writing or reading failed (the I/O error's message).
    Io(String),
    /// No complete answer within the timeout.
    Timeout,
    /// An answer that is not HTTP/1.x, or a body that breaks its own framing.
    BadResponse(String),
    /// A status other than 200.
    Status(u16),
    /// The body is over [`MAX_BODY`] or not UTF-8.
    BadBody(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl(u) => write!(f, "not an http:// URL: {u:?}"),
            Self::Io(m) => write!(f, "I/O: {m}"),
            Self::Timeout => f.write_str("timed out"),
            Self::BadResponse(m) => write!(f, "bad HTTP response: {m}"),
            Self::Status(s) => write!(f, "HTTP status {s}"),
            Self::BadBody(m) => write!(f, "bad body: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// `(host:port, path)` of an `http://` URL (port 80 when absent).
fn split_url(url: &str) -> Result<(String, String), HttpError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| HttpError::BadUrl(url.to_owned()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(HttpError::BadUrl(url.to_owned()));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.contains(']'));
    let addr = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((addr, path.to_owned()))
}

/// `GET url`, the whole exchange bounded by `timeout`; the body as text.
///
/// # Errors
/// [`HttpError`], by what failed.
pub async fn get(url: &str, timeout: Duration) -> Result<String, HttpError> {
    let (addr, path) = split_url(url)?;
    match tokio::time::timeout(timeout, exchange(&addr, &path)).await {
        Ok(r) => r,
        Err(_) => Err(HttpError::Timeout),
    }
}

async fn exchange(addr: &str, path: &str) -> Result<String, HttpError> {
    let io = |e: std::io::Error| HttpError::Io(e.to_string());
    let mut s = TcpStream::connect(addr).await.map_err(io)?;
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.map_err(io)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut buf).await.map_err(io)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if raw.len() > MAX_BODY + 64 * 1024 {
            return Err(HttpError::BadBody(format!("over {MAX_BODY} bytes")));
        }
    }
    parse_response(&raw)
}

fn bad(m: &str) -> HttpError {
    HttpError::BadResponse(m.to_owned())
}

/// Parses a whole HTTP/1.x response into its body.
fn parse_response(raw: &[u8]) -> Result<String, HttpError> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let mut parts = status.split(' ');
    if !parts.next().unwrap_or_default().starts_with("HTTP/1.") {
        return Err(bad("not HTTP/1.x"));
    }
    let code: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let (mut length, mut chunked) = (None, false);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            length = Some(v.parse::<usize>().map_err(|_| bad("bad Content-Length"))?);
        } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
    }
    if code != 200 {
        return Err(HttpError::Status(code));
    }
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        rest.get(..n)
            .ok_or_else(|| bad("body shorter than Content-Length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    if body.len() > MAX_BODY {
        return Err(HttpError::BadBody(format!("over {MAX_BODY} bytes")));
    }
    String::from_utf8(body).map_err(|_| HttpError::BadBody("not UTF-8".into()))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("truncated chunk size"))?;
        let size = std::str::from_utf8(&rest[..eol]).map_err(|_| bad("bad chunk size"))?;
        let size = size.split(';').next().unwrap_or_default().trim();
        let n = usize::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
        rest = &rest[eol + 2..];
        if n == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..n).ok_or_else(|| bad("truncated chunk"))?;
        out.extend_from_slice(chunk);
        if out.len() > MAX_BODY {
            return Err(HttpError::BadBody(format!("over {MAX_BODY} bytes")));
        }
        rest = rest.get(n + 2..).ok_or_else(|| bad("truncated chunk"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_and_urls() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_response(ok).unwrap(), "hello");
        let ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
        assert_eq!(parse_response(ch).unwrap(), "hello");
        let e = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_response(e), Err(HttpError::Status(500)));
        assert!(matches!(
            parse_response(b"garbage"),
            Err(HttpError::BadResponse(_))
        ));
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello";
        assert!(matches!(
            parse_response(short),
            Err(HttpError::BadResponse(_))
        ));
        assert_eq!(
            split_url("http://h:8000/metrics").unwrap(),
            ("h:8000".into(), "/metrics".into())
        );
        assert_eq!(split_url("http://h").unwrap(), ("h:80".into(), "/".into()));
        assert!(split_url("https://h/").is_err());
    }
}
