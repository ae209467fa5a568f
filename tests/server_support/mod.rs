//! Shared by the server tests: starts `switchyard serve` on a free loopback port with the
//! default model, and speaks just enough HTTP/1.1 over a `TcpStream` (one request per
//! connection, chunked bodies decoded) to check status codes, headers and SSE streams.
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest a test waits for one response or for the server to start.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// A running `switchyard serve`, killed when dropped.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Everything it printed on stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the server on 127.0.0.1, port 0, with `extra` flags, and waits until it
    /// prints its address.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// [`Server::start`] with extra environment variables (`SWITCHYARD_FAULT`, say).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (found, address) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let _ = found.send(line[at + "listening on http://".len()..].to_string());
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = match address.recv_timeout(TIMEOUT) {
            Ok(text) => text.trim().parse().expect("a socket address"),
            Err(_) => {
                let _ = child.kill();
                panic!("the server did not start: {}", log.lock().unwrap());
            }
        };
        Server { child, addr, log }
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole HTTP response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header names (lower-case) and values.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Connects with the test timeouts set.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connects");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    stream
}

/// Writes a request with `body` (sent as JSON) on a fresh connection.
pub fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> TcpStream {
    send_with(addr, method, path, body, &[])
}

/// As [`send`], with `headers` added.
pub fn send_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> TcpStream {
    let mut stream = connect(addr);
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream
}

/// Sends a request and reads the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Response {
    request_with(addr, method, path, body, &[])
}

/// Sends a request with `headers` added and reads the whole response.
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Response {
    let mut stream = send_with(addr, method, path, body, headers);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reads the response");
    parse(&raw)
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, b"")
}

/// `POST path` with a JSON body.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    request(addr, "POST", path, body.to_string().as_bytes())
}

fn parse(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .expect("a chunk size");
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
    out
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .map(str::to_string)
        })
        .collect()
}

/// A completed stream: its text, chunk ids and finish reason. Panics unless it is
/// well-formed: JSON chunks, then exactly one final `[DONE]`.
#[derive(Debug)]
pub struct Streamed {
    /// The deltas (or completion texts) joined.
    pub text: String,
    /// The `id` of every chunk.
    pub ids: Vec<String>,
    /// The last non-null `finish_reason`.
    pub finish_reason: Option<String>,
}

/// The JSON chunks of an SSE stream's body. Panics unless it is well-formed: JSON
/// chunks without an error, then exactly one final `[DONE]`.
pub fn chunks(body: &str) -> Vec<Value> {
    let data = sse_data(body);
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "stream does not end with [DONE]: {body}"
    );
    data[..data.len() - 1]
        .iter()
        .map(|payload| {
            let chunk: Value = serde_json::from_str(payload).expect("a JSON chunk");
            assert!(chunk.get("error").is_none(), "stream failed: {payload}");
            chunk
        })
        .collect()
}

/// Checks and reads an SSE stream's body.
pub fn read_stream(body: &str) -> Streamed {
    let mut streamed = Streamed {
        text: String::new(),
        ids: Vec::new(),
        finish_reason: None,
    };
    for chunk in chunks(body) {
        streamed
            .ids
            .push(chunk["id"].as_str().expect("an id").to_string());
        for choice in chunk["choices"].as_array().expect("choices") {
            let piece = choice["delta"]["content"]
                .as_str()
                .or_else(|| choice["text"].as_str())
                .unwrap_or("");
            streamed.text.push_str(piece);
            if let Some(reason) = choice["finish_reason"].as_str() {
                streamed.finish_reason = Some(reason.to_string());
            }
        }
    }
    streamed
}

/// A chat request body for one user message.
pub fn chat(content: &str, max_tokens: u32, stream: bool) -> Value {
    serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    })
}

/// The value of an unlabelled sample in a `/metrics` text, or of one with `labels`.
pub fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
