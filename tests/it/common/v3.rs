//! A raw HTTP/1.1 client for Confluent v3 streams, written as Confluent's example is: one
//! thread writes chunks, another reads `\r\n`-delimited reports while it writes.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::Value;

use super::KEY;

/// Opens a chunked POST to `path` with the test key; the stream to write to and a reader.
pub fn open_stream(addr: SocketAddr, path: &str) -> (TcpStream, BufReader<TcpStream>) {
    open_stream_with(addr, path, KEY)
}

pub fn open_stream_with(
    addr: SocketAddr,
    path: &str,
    key: &str,
) -> (TcpStream, BufReader<TcpStream>) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("head");
    let reader = BufReader::new(stream.try_clone().expect("clone"));
    (stream, reader)
}

pub fn write_chunk(stream: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    stream.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
    stream.write_all(data)?;
    stream.write_all(b"\r\n")
}

/// Reads the status line and headers; the status.
pub fn read_head(reader: &mut impl BufRead) -> u16 {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    status
}

/// The reports of a chunked response, one at a time, as they arrive.
pub struct ReportReader<R> {
    reader: R,
    pending: Vec<u8>,
    /// The body ended (final chunk) or the connection closed.
    pub ended: bool,
}

impl<R: BufRead> ReportReader<R> {
    /// After [`read_head`].
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            pending: Vec::new(),
            ended: false,
        }
    }

    /// The next report; `None` once the body or the connection has ended.
    pub fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(at) = self.pending.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.pending.drain(..at + 2).collect();
                let text = String::from_utf8_lossy(&line[..at]).into_owned();
                if text.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")));
            }
            if self.ended || !self.chunk() {
                self.ended = true;
                return None;
            }
        }
    }

    /// Every report still to come, until the body or the connection ends.
    pub fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(r) = self.next() {
            out.push(r);
        }
        out
    }

    /// Reads one chunk into `pending`; false at the body's or the connection's end.
    fn chunk(&mut self) -> bool {
        let mut line = String::new();
        if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        let size = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
        if size == 0 {
            return false;
        }
        let mut chunk = vec![0u8; size + 2];
        if self.reader.read_exact(&mut chunk).is_err() {
            return false;
        }
        self.pending.extend_from_slice(&chunk[..size]);
        true
    }
}

/// The reports of a chunked response, until it ends.
pub fn read_reports(reader: &mut BufReader<TcpStream>) -> Vec<Value> {
    let status = read_head(reader);
    assert_eq!(status, 200);
    ReportReader::new(reader).rest()
}

/// Reads the head (which must be 200) and the first report, which must say its record was
/// written; the reader, for the reports after it.
pub fn first_written(mut reader: BufReader<TcpStream>) -> ReportReader<BufReader<TcpStream>> {
    assert_eq!(read_head(&mut reader), 200);
    let mut reports = ReportReader::new(reader);
    let first = reports.next();
    assert_eq!(
        first.as_ref().map(|r| r["error_code"].clone()),
        Some(Value::from(200)),
        "{first:?}"
    );
    reports
}

/// A whole stream, as Confluent's example client runs one: opens `path`, writes `chunks` from
/// a thread of their own and ends the body, while this thread reads every report. Blocking:
/// call it from `spawn_blocking`.
pub fn stream_chunks(
    addr: SocketAddr,
    path: &str,
    chunks: impl IntoIterator<Item = Vec<u8>> + Send + 'static,
) -> Vec<Value> {
    let (mut stream, mut reader) = open_stream(addr, path);
    let writer = std::thread::spawn(move || {
        for chunk in chunks {
            write_chunk(&mut stream, &chunk).expect("write");
        }
        stream.write_all(b"0\r\n\r\n").expect("end");
        stream
    });
    let reports = read_reports(&mut reader);
    drop(writer.join());
    reports
}
