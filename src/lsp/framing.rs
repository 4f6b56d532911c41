//! The LSP base protocol: a `Content-Length` header, a blank line, a JSON body. Language
//! servers and editors speak it over stdio.

use serde_json::Value;

/// Largest framed message body read from a stdio peer (a language server or an editor).
pub const MAX_FRAMED: usize = 64 << 20;

/// Reads one `Content-Length`-framed message body (the LSP base protocol, used by language
/// servers and editors over stdio). `Ok(None)` at a clean end of stream between messages.
/// Other headers (`Content-Type`) are ignored; header names are case-insensitive.
pub fn read_framed(r: &mut impl std::io::BufRead) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{BufRead, Error, ErrorKind, Read};
    let mut length: Option<usize> = None;
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        let n = (&mut *r).take(8192).read_until(b'\n', &mut line)?;
        if n == 0 {
            return if first {
                Ok(None)
            } else {
                Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "end of stream inside a header",
                ))
            };
        }
        first = false;
        if !line.ends_with(b"\n") {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "header line longer than 8 KiB",
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!("bad Content-Length {value:?}"),
                )
            })?);
        }
    }
    let length = length
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "message without Content-Length"))?;
    if length > MAX_FRAMED {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "message of {length} bytes is above the {} MiB limit",
                MAX_FRAMED >> 20
            ),
        ));
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// One message with its header, as written on the wire.
pub fn encode(v: &Value) -> Vec<u8> {
    let body = v.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn framed_messages_round_trip_and_reject_bad_headers() {
        let mut buf = encode(&json!({"jsonrpc": "2.0", "method": "é"}));
        let body = r#"{"jsonrpc":"2.0","method":"é"}"#;
        assert_eq!(
            buf,
            format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
        );
        buf.extend_from_slice(b"content-length: 2\r\nContent-Type: x\r\n\r\n{}");
        let mut r = std::io::Cursor::new(buf);
        assert_eq!(read_framed(&mut r).unwrap().unwrap(), body.as_bytes());
        assert_eq!(read_framed(&mut r).unwrap().unwrap(), b"{}");
        assert!(read_framed(&mut r).unwrap().is_none());
        for bad in [
            &b"Content-Type: x\r\n\r\n{}"[..],
            b"Content-Length: x\r\n\r\n",
            b"Content-Length: 5\r\n",
        ] {
            assert!(read_framed(&mut std::io::Cursor::new(bad)).is_err());
        }
        let huge = format!("Content-Length: {}\r\n\r\n", MAX_FRAMED + 1);
        assert!(read_framed(&mut std::io::Cursor::new(huge)).is_err());
    }
}
