//! What the forge's integration tests share: the scripted GitHub with a
//! repository and a token, a client for it, a git CLI helper, and a small
//! HTTP recorder (a webhook receiver, and a log host that shows which
//! headers reached it).
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use swarm_forge::{GitHub, GitHubConfig, Token};
use swarm_tests::github::GitHub as Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const OWNER: &str = "acme";
pub const REPO: &str = "widgets";
pub const TOKEN: &str = "ghs_swarmTestToken0123456789";
pub const BOT: &str = "swarm-bot";

/// The scripted GitHub with `acme/widgets` (main seeded, `swarm-bot` a
/// writer with [`TOKEN`]) and a client for it.
pub struct Forge {
    pub server: Server,
    pub client: GitHub,
    pub main: String,
}

pub fn forge() -> Forge {
    let server = Server::start();
    server.add_token(TOKEN, BOT);
    server.create_repo(OWNER, REPO, "main");
    server.add_collaborator(OWNER, REPO, BOT, "write");
    let main = server.seed(OWNER, REPO, "main", &[("README.md", "widgets\n")], "initial");
    let client = client_for(&server, TOKEN);
    Forge { server, client, main }
}

/// A client of `server`'s `acme/widgets` with `token`; the GraphQL URL is
/// derived from the REST one, as for GHES.
pub fn client_for(server: &Server, token: &str) -> GitHub {
    GitHub::new(GitHubConfig::new(&server.api_url(), OWNER, REPO, Token::new(token).unwrap())).unwrap()
}

impl Forge {
    /// A branch off main with one commit; its sha.
    pub fn branch(&self, name: &str) -> String {
        self.server.seed(OWNER, REPO, name, &[(&format!("{name}.txt"), name)], &format!("work on {name}"))
    }
}

/// Runs git in `dir`, panicking with its stderr on failure; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Commits a file in the work tree at `dir`; the new sha.
pub fn commit(dir: &Path, file: &str, content: &str) -> String {
    std::fs::write(dir.join(file), content).unwrap();
    git(dir, &["add", file]);
    git(dir, &["commit", "-q", "-m", &format!("write {file}")]);
    git(dir, &["rev-parse", "HEAD"])
}

/// One request the recorder received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// An answer: status, headers, body.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A minimal HTTP/1.1 server on 127.0.0.1 that records every request and
/// answers it with `answer(request, own base URL)`; one request per
/// connection. Stops with the test's runtime.
pub struct Recorder {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    pub async fn start(answer: fn(&Recorded, &str) -> Answer) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (base, log) = (url.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (base, log) = (base.clone(), log.clone());
                tokio::spawn(async move {
                    let Some(req) = read_request(&mut conn).await else { return };
                    let (status, headers, body) = answer(&req, &base);
                    log.lock().unwrap().push(req);
                    let mut head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                        body.len()
                    );
                    for (k, v) in headers {
                        head.push_str(&format!("{k}: {v}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(&body).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Recorder { url, seen }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.seen.lock().unwrap().clone()
    }
}

async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded { method, path, headers, body })
}
